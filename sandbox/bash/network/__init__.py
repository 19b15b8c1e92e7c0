"""Network by name (network="allowlist"): the allowlist and the egress proxy."""

from typing import TYPE_CHECKING

from sandbox._lazy import exports

if TYPE_CHECKING:
    from sandbox.bash.network.allowlist import Allowlist, DomainRule, parse_entry
    from sandbox.bash.network.proxy import EgressProxy, proxy_environment

__getattr__, __dir__ = exports(
    __name__,
    {
        "sandbox.bash.network.allowlist": (
            "Allowlist",
            "DomainRule",
            "parse_entry",
        ),
        "sandbox.bash.network.proxy": (
            "EgressProxy",
            "proxy_environment",
        ),
    },
)

__all__ = ["Allowlist", "DomainRule", "EgressProxy", "parse_entry", "proxy_environment"]
