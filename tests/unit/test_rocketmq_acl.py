"""ACL 1.0 signing (AclClientRPCHook + AclUtils#combineRequestContent + AclSigner).

The known-answer test reuses RFC 2202's HMAC-SHA1 test case 2 (key "Jefe", data
"what do ya want for nothing?") by choosing an access key and one extField whose values,
concatenated in key order, spell that data -- an expectation computed independently of
this code.
"""

from __future__ import annotations

import base64
import pickle

import pytest

from rocketlake.rocketmq.acl import AclClientRPCHook, Credentials, sign, signing_content
from rocketlake.rocketmq.errors import InvalidArgument
from rocketlake.rocketmq.frame import RemotingCommand

RFC2202_CASE2_DIGEST = bytes.fromhex("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79")


def test_signature_matches_rfc2202_hmac_sha1_known_answer() -> None:
    request = RemotingCommand(code=105, ext_fields={"b": " for nothing?"})
    AclClientRPCHook(Credentials("what do ya want", "Jefe")).before_request("127.0.0.1:9876", request)
    # Sorted keys: "AccessKey" < "b"; values "what do ya want" + " for nothing?"; empty body.
    assert request.ext_fields["AccessKey"] == "what do ya want"
    assert request.ext_fields["Signature"] == base64.b64encode(RFC2202_CASE2_DIGEST).decode()
    assert request.ext_fields["Signature"] == "7/zfauXrL6LSdBbV8YTfnCWafHk="


def test_signing_content_is_sorted_values_without_signature_then_body() -> None:
    fields = {"topic": "T1", "AccessKey": "ak", "SecurityToken": "tok", "Signature": "old", "queueId": "0"}
    # AccessKey < SecurityToken < Signature(skipped) < queueId < topic  (upper case sorts first)
    assert signing_content(fields, b"\x00body") == b"ak" + b"tok" + b"0" + b"T1" + b"\x00body"


def test_keys_sort_in_java_utf16_order_not_code_point_order() -> None:
    # U+FF61 < U+1F600 as code points, but Java compares UTF-16 units: 0xD83D (high surrogate) < 0xFF61.
    fields = {"\uff61": "second", "\U0001f600": "first"}
    assert signing_content(fields) == b"firstsecond"


def test_security_token_is_added_and_signed() -> None:
    request = RemotingCommand(code=11, ext_fields={"topic": "T"}, body=b"xyz")
    AclClientRPCHook(Credentials("ak", "sk", "sts")).before_request("a:1", request)
    fields = request.ext_fields
    assert fields["SecurityToken"] == "sts"
    assert fields["Signature"] == sign(b"ak" + b"sts" + b"T" + b"xyz", "sk")


def test_resigning_ignores_a_previous_signature() -> None:
    hook = AclClientRPCHook(Credentials("ak", "sk"))
    request = RemotingCommand(code=11, ext_fields={"topic": "T"})
    hook.before_request("a:1", request)
    first = request.ext_fields["Signature"]
    hook.before_request("a:1", request)
    assert request.ext_fields["Signature"] == first


def test_credentials_repr_hides_secrets_but_pickles_them() -> None:
    credentials = Credentials("my-access", "super-secret", "sts-token")
    text = repr(credentials) + repr(AclClientRPCHook(credentials)) + str(credentials)
    assert "super-secret" not in text and "sts-token" not in text
    assert "my-access" in text
    assert pickle.loads(pickle.dumps(credentials)) == credentials


@pytest.mark.parametrize("access_key, secret_key", [("", "s"), ("a", "")])
def test_credentials_need_both_keys(access_key: str, secret_key: str) -> None:
    with pytest.raises(InvalidArgument, match="access key and secret key"):
        Credentials(access_key, secret_key)


def test_the_resource_hands_spark_the_variables_names_never_the_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from rocketlake.dagster.rocketmq_resource import MissingCredentials, RocketMQResource
    from rocketlake.engine.broker_access import _credentials
    from rocketlake.engine.options import SourceOptionError, parse_options

    resource = RocketMQResource(
        namesrv="127.0.0.1:9876", access_key_env="RL_TEST_AK", secret_key_env="RL_TEST_SK", cluster="prod"
    )
    monkeypatch.delenv("RL_TEST_AK", raising=False)
    monkeypatch.delenv("RL_TEST_SK", raising=False)
    with pytest.raises(MissingCredentials, match="cluster 'prod' signs its requests.*RL_TEST_AK and RL_TEST_SK"):
        resource.source_options()
    monkeypatch.setenv("RL_TEST_AK", "ak-value-1")
    monkeypatch.setenv("RL_TEST_SK", "sk-value-secret-1")
    options = resource.source_options()
    assert options["accessKeyEnv"] == "RL_TEST_AK" and options["secretKeyEnv"] == "RL_TEST_SK"
    assert "sk-value-secret-1" not in repr(options) and "ak-value-1" not in repr(options)
    assert resource.credentials() == Credentials("ak-value-1", "sk-value-secret-1")
    # A Spark worker resolves them in its own environment...
    assert _credentials(parse_options({"topic": "t", **options})) == Credentials("ak-value-1", "sk-value-secret-1")
    # ... and one without them says which variable and where to set it.
    monkeypatch.delenv("RL_TEST_SK")
    with pytest.raises(SourceOptionError, match="RL_TEST_SK is not set in this Spark worker.*executors"):
        _credentials(parse_options({"topic": "t", **options}))


def test_keys_read_from_the_environment_name_every_variable_not_set() -> None:
    from rocketlake.rocketmq.acl import KeysNotSet, credentials_from_environment

    environ = {"RL_AK": "ak", "RL_EMPTY": ""}
    assert credentials_from_environment("RL_AK", "RL_AK", environ) == Credentials("ak", "ak")
    with pytest.raises(KeysNotSet) as one:
        credentials_from_environment("RL_AK", "RL_SK", environ)
    assert one.value.names == ["RL_SK"] and str(one.value) == "the environment variable RL_SK not set"
    with pytest.raises(KeysNotSet) as both:
        credentials_from_environment("RL_EMPTY", None, environ)  # an empty variable is not a key
    assert both.value.names == ["RL_EMPTY", "None"]
