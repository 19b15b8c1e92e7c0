"""Network by name (network="allowlist"): the allowlist and the egress proxy."""

from sandbox.bash.network.allowlist import Allowlist, DomainRule, parse_entry
from sandbox.bash.network.proxy import EgressProxy, proxy_environment

__all__ = ["Allowlist", "DomainRule", "EgressProxy", "parse_entry", "proxy_environment"]
