"""Network by name (network="allowlist"): the allowlist and the egress proxy."""

from .allowlist import Allowlist, DomainRule, parse_entry
from .proxy import EgressProxy, proxy_environment

__all__ = ["Allowlist", "DomainRule", "EgressProxy", "parse_entry", "proxy_environment"]
