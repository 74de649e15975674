"""The lake's storage settings: what Spark and delta-rs are given for a local and an S3 lake, refused roots and
missing keys in one sentence that names the variable and never shows a key."""

import pytest
from pydantic import ValidationError

from rocketlake.delta.storage import (
    DYNAMODB_LOG_STORE,
    ENVIRONMENT_CREDENTIALS_PROVIDER,
    StorageKeysMissing,
    delta_rs_options,
    hadoop_settings,
    server_keys,
    server_refusal,
    server_settings,
    several_writers_refusal,
)
from rocketlake.engine.config import LakeConfig

SECRET = "s3cr3t-value-never-shown"
S3 = {
    "endpoint": "http://127.0.0.1:7070",
    "path_style_access": True,
    "access_key_env": "LAKE_KEY",
    "secret_key_env": "LAKE_SECRET",
}


def lake(**changes) -> LakeConfig:
    return LakeConfig(**{"root": "s3a://lake/prefix", "s3": S3, **changes})


def test_an_s3_lake_gives_spark_its_endpoint_and_delta_rs_the_same_with_the_keys():
    settings = hadoop_settings(lake())
    assert settings == {
        "fs.s3a.bucket.lake.endpoint.region": "us-east-1",
        "fs.s3a.bucket.lake.path.style.access": "true",
        "fs.s3a.bucket.lake.endpoint": "http://127.0.0.1:7070",
        "fs.s3a.bucket.lake.connection.ssl.enabled": "false",
        "fs.s3a.bucket.lake.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }
    assert SECRET not in repr(settings)
    options = delta_rs_options(lake(), {"LAKE_KEY": "rocketlake", "LAKE_SECRET": SECRET})
    assert options == {
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:7070",
        "AWS_ALLOW_HTTP": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_ACCESS_KEY_ID": "rocketlake",
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }


def test_a_local_lake_needs_nothing():
    local = LakeConfig(root="/tmp/lake")
    assert hadoop_settings(local) == {} and delta_rs_options(local, {}) is None


def test_aws_without_keys_uses_the_default_credential_chains():
    aws = LakeConfig(root="s3a://bucket/tables", s3={"region": "eu-west-1"})
    assert "fs.s3a.bucket.bucket.aws.credentials.provider" not in hadoop_settings(aws)
    assert delta_rs_options(aws, {}) == {"AWS_REGION": "eu-west-1", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"}


def test_missing_keys_name_the_variables_never_a_value():
    with pytest.raises(StorageKeysMissing) as e:
        delta_rs_options(lake(), {"LAKE_KEY": "rocketlake"})
    assert "$LAKE_SECRET is not set" in str(e.value) and "lake.s3.secret_key_env" in str(e.value)
    assert "rocketlake" not in str(e.value).replace("rocketlake's", "")


def test_a_spark_connect_server_starts_with_the_buckets_settings_and_its_keys_in_its_environment():
    """The server's Spark settings name the bucket's endpoint, region and path style, and a credentials provider that
    reads the keys from the server's environment: the keys go there from the variables the configuration names, and
    into no setting (which the event log, the UI and the server's command line show)."""
    settings = server_settings(lake())
    assert settings == {
        "spark.hadoop.fs.s3a.bucket.lake.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.bucket.lake.path.style.access": "true",
        "spark.hadoop.fs.s3a.bucket.lake.endpoint": "http://127.0.0.1:7070",
        "spark.hadoop.fs.s3a.bucket.lake.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.bucket.lake.aws.credentials.provider": ENVIRONMENT_CREDENTIALS_PROVIDER,
    }
    assert (
        ENVIRONMENT_CREDENTIALS_PROVIDER
        == "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
    )
    environ = {
        "LAKE_KEY": "rocketlake",
        "LAKE_SECRET": SECRET,
        "AWS_SESSION_TOKEN": "another account's",
        "PATH": "/bin",
    }
    server_keys(lake(), environ)
    # AWS's variable names, read by that provider; a session token of another account would go with them: dropped.
    assert environ == {
        "LAKE_KEY": "rocketlake",
        "LAKE_SECRET": SECRET,
        "PATH": "/bin",
        "AWS_ACCESS_KEY_ID": "rocketlake",
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }
    assert SECRET not in repr(settings)
    with pytest.raises(StorageKeysMissing) as e:
        server_keys(lake(), {"LAKE_KEY": "rocketlake"})
    assert "$LAKE_SECRET is not set" in str(e.value)
    # A local lake gives the server nothing; AWS without keys: the default credential chains, the environment as is.
    assert server_settings(LakeConfig(root="/tmp/lake")) == {}
    aws, untouched = LakeConfig(root="s3a://bucket/tables", s3={"region": "eu-west-1"}), {"AWS_PROFILE": "prod"}
    server_keys(aws, untouched)
    assert untouched == {"AWS_PROFILE": "prod"}
    assert "spark.hadoop.fs.s3a.bucket.bucket.aws.credentials.provider" not in server_settings(aws)


def test_a_server_started_without_the_lakes_bucket_settings_is_refused_in_one_sentence():
    started_with = server_settings(lake())
    assert server_refusal(lake(), started_with.get) is None
    assert server_refusal(lake(root="s3a://lake/another/prefix"), started_with.get) is None  # the bucket's settings
    assert server_refusal(LakeConfig(root="/tmp/lake"), {}.get) is None
    elsewhere = {**started_with, "spark.hadoop.fs.s3a.bucket.lake.endpoint": "http://127.0.0.1:9000"}
    for server, names in (
        ({}, "spark.hadoop.fs.s3a.bucket.lake.endpoint.region is not set there, 'us-east-1' in"),
        (
            elsewhere,
            "spark.hadoop.fs.s3a.bucket.lake.endpoint is 'http://127.0.0.1:9000' there, 'http://127.0.0.1:7070' in",
        ),
    ):
        refusal = server_refusal(lake(), server.get)
        assert refusal is not None and refusal.count(". ") == 0 and refusal.endswith("and run again"), refusal
        assert refusal.startswith(
            "the Spark Connect server (spark.remote) was not started with the S3 settings of "
            "the lake s3a://lake/prefix ("
        )
        assert names in refusal and "start it with this configuration (rocketlake spark-server" in refusal
    other_bucket = server_refusal(lake(root="s3a://other/prefix"), started_with.get)
    assert other_bucket is not None and "fs.s3a.bucket.other." in other_bucket


@pytest.mark.parametrize(
    ("root", "s3", "says"),
    [
        ("s3://lake/x", None, "write s3a://lake/x"),
        ("s3n://lake/x", None, "write s3a://lake/x"),
        ("gs://lake/x", None, "does not support yet"),
        ("s3a:///x", None, "names no bucket"),
        ("/tmp/lake", S3, "not on S3"),
        ("s3a://lake/x", {**S3, "endpoint": "127.0.0.1:7070"}, "is not an endpoint URL"),
        ("s3a://lake/x", {"access_key_env": "ONLY_ONE"}, "go together"),
    ],
)
def test_roots_and_settings_that_cannot_work_are_refused_at_load(root, s3, says):
    with pytest.raises(ValidationError) as e:
        LakeConfig(root=root, s3=s3)
    assert says in str(e.value)


def test_several_deployments_may_not_write_one_s3_table_with_the_single_driver_log_store():
    two = ("10.0.0.1@a", "10.0.0.2@b")
    refusal = several_writers_refusal("s3a://lake/orders", two, None)
    assert refusal is not None and "10.0.0.1@a, 10.0.0.2@b" in refusal and DYNAMODB_LOG_STORE in refusal
    assert several_writers_refusal("s3a://lake/orders", two[:1], None) is None  # one deployment: its pool serializes
    assert several_writers_refusal("/tmp/lake/orders", two, None) is None  # a filesystem with atomic renames
    assert several_writers_refusal("s3a://lake/orders", two, DYNAMODB_LOG_STORE) is None
