"""RocketMQ's second namespace form: the namespace in every request's fields, not in the resources' names.

The Java client (5.x, ``ClientConfig.setNamespaceV2``) adds ``nsd=true`` and ``ns=<namespace>`` to every request it
sends, name servers' and brokers' alike (``NamespaceRpcHook``), and leaves topic and group names as the user wrote
them; a server that scopes resources by namespace (a hosted proxy) reads them. The open-source broker, name server
and proxy declare the fields (``RpcRequestHeader``) and read neither (5.3: nothing calls ``getNs``), so against them
the names alone count. The hook runs before the ACL signature (the Java client registers it first): the fields are
signed with the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from .connection import RPCHook
from .frame import RemotingCommand

#: ``MixAll.RPC_REQUEST_HEADER_NAMESPACED_FIELD`` and ``MixAll.RPC_REQUEST_HEADER_NAMESPACE_FIELD``.
NAMESPACED_FIELD = "nsd"
NAMESPACE_FIELD = "ns"


@dataclass(frozen=True, slots=True)
class NamespaceRPCHook:
    namespace: str

    def before_request(self, address: str, request: RemotingCommand) -> None:
        request.ext_fields[NAMESPACED_FIELD] = "true"
        request.ext_fields[NAMESPACE_FIELD] = self.namespace


@dataclass(frozen=True, slots=True)
class ChainedRPCHook:
    """Hooks run in their order (the namespace's first, then the signature's)."""

    hooks: tuple[RPCHook, ...]

    def before_request(self, address: str, request: RemotingCommand) -> None:
        for hook in self.hooks:
            hook.before_request(address, request)


def request_hook(namespace_v2: str | None, signature: RPCHook | None) -> RPCHook | None:
    """What every request of a client goes through: ``namespace_v2``'s fields, then ``signature`` (ACL)."""
    hooks = tuple(h for h in (NamespaceRPCHook(namespace_v2) if namespace_v2 else None, signature) if h is not None)
    if not hooks:
        return None
    return hooks[0] if len(hooks) == 1 else ChainedRPCHook(hooks)
