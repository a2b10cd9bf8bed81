"""AuthzService use cases: authenticate, authorize, personal tokens, audit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from engram.authz.enforcement import PolicyAuthorizer
from engram.authz.ports import AuditEntry, AuditLog
from engram.authz.tokens import (
    StoredToken,
    TokenAuthenticator,
    TokenStore,
    hash_token,
    new_personal_token,
)
from engram.domain.errors import (
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    quoted,
)
from engram.domain.pagination import PageSize, decode_page_token, encode_page_token
from engram.domain.policy import Decision, Target
from engram.domain.ports import AuditRecord
from engram.domain.principals import Action, Principal, Role
from engram.domain.spaces import RESERVED_TENANT, SpaceRef, validate_field

DEFAULT_TOKEN_TTL = timedelta(days=90)
MAX_TOKEN_TTL = timedelta(days=366)
AUDIT_PAGE = PageSize(default=100, maximum=1000)
TOKEN_PAGE = PageSize(default=100, maximum=1000)
MAX_DESCRIPTION = 200
ACT_AS_DISABLED = "act_as_disabled"
ACT_AS_AUDIT_ACTION = "token.act_as"


@dataclass(frozen=True, slots=True)
class CreatedToken:
    token: str
    token_id: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class TokenPage:
    tokens: list[StoredToken]
    next_page_token: str


@dataclass(frozen=True, slots=True)
class AuditPage:
    entries: list[AuditEntry]
    next_page_token: str


class AuthzService:
    def __init__(
        self,
        authenticator: TokenAuthenticator,
        tokens: TokenStore,
        audit: AuditLog,
        authorizer: PolicyAuthorizer,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        allow_act_as: bool = False,
    ) -> None:
        # Whether admins may create tokens for other users (off by default, see create_token).
        self._allow_act_as = allow_act_as
        self._authenticator = authenticator
        self._tokens = tokens
        self._audit = audit
        self._authorizer = authorizer
        self._clock = clock

    async def authenticate(self, token: str) -> Principal:
        if not token.strip():
            raise Unauthenticated("token is required")
        return await self._authenticator.resolve(token.strip())

    def authorize(self, principal: Principal, action: Action, space: SpaceRef) -> Decision:
        """The decision, never an exception for a refusal (InvalidSpaceRef for a bad ref)."""
        return self._authorizer.decide(principal, action, space)

    async def create_token(
        self,
        principal: Principal,
        *,
        user: str,
        role: Role | None,
        ttl_seconds: int,
        description: str,
        tenant: str,
    ) -> CreatedToken:
        owner = _token_tenant(principal, tenant)
        subject = user or principal.subject
        validate_field("user", subject, required=True)
        # A token for another user lets its holder act as that user, including reading the
        # user's `user` spaces: it is an explicit, audited right that is off by default.
        acting_as = subject != principal.subject or owner != principal.tenant
        if acting_as and not self._allow_act_as:
            raise PermissionDenied(
                "creating a token for another user would let you act as them; this server "
                "does not allow it (ENGRAM_ALLOW_ACT_AS): the user creates their own token",
                rule=ACT_AS_DISABLED,
            )
        granted = role or Role.MEMBER
        if granted > principal.role and not principal.platform_admin:
            raise PermissionDenied(
                f"a token cannot carry more than your own role ({principal.role.name.lower()})",
                rule="role_above_caller",
            )
        ttl = _token_ttl(ttl_seconds, description)
        now = self._clock()
        token, token_id = new_personal_token()
        await self._tokens.insert(
            StoredToken(
                token_id=token_id,
                token_hash=hash_token(token),
                tenant=owner,
                user=subject,
                role=granted,
                expires_at=now + ttl,
                created_at=now,
                created_by=principal.subject,
                description=description,
            )
        )
        if acting_as:
            await self._audit.append(
                AuditRecord(
                    action=ACT_AS_AUDIT_ACTION,
                    subject=principal.subject,
                    tenant=owner,
                    space_id="",
                    path=f"user:{subject} token:{token_id} role:{granted.name.lower()}",
                    bytes_delta=0,
                ),
                at=now,
            )
        return CreatedToken(token=token, token_id=token_id, expires_at=now + ttl)

    async def revoke_token(self, principal: Principal, token_id: str) -> None:
        stored = await self._tokens.get(token_id) if token_id else None
        visible = stored is not None and (
            principal.platform_admin or stored.tenant == principal.tenant
        )
        if stored is None or not visible:
            raise NotFound(f"no token {quoted(token_id)} in your tenant")
        own = stored.user == principal.subject
        if not (own or principal.platform_admin or principal.role >= Role.ADMIN):
            raise PermissionDenied(
                "revoking another user's token needs a tenant admin", rule="admin_role_required"
            )
        await self._tokens.revoke(token_id, self._clock())
        self._authenticator.forget(token_id)

    async def list_tokens(
        self, principal: Principal, *, tenant: str, user: str, page_size: int, page_token: str
    ) -> TokenPage:
        """A tenant's tokens, by id (tenant admins; platform admins name any tenant)."""
        owner = tenant or principal.tenant
        target = Target.OWN if owner == principal.tenant else Target.OTHER
        if not await self._authorizer.permits(principal, Action.LIST_TOKENS, target):
            if target is Target.OTHER:
                raise PermissionDenied(
                    "you can only list the tokens of your own tenant", rule="tenant_mismatch"
                )
            raise PermissionDenied(
                "listing tokens needs a tenant admin", rule="admin_role_required"
            )
        validate_field("tenant", owner, required=True)
        if user:
            validate_field("user", user, required=True)
        limit = TOKEN_PAGE.resolve(page_size)
        scope = ("tokens", owner, user)
        position = decode_page_token(page_token, scope) or {"after": ""}
        found = await self._tokens.list(
            owner, user=user, after=str(position["after"]), limit=limit + 1
        )
        more = len(found) > limit
        found = found[:limit]
        token = encode_page_token(scope, {"after": found[-1].token_id}) if more else ""
        return TokenPage(tokens=found, next_page_token=token)

    async def list_audit(
        self, principal: Principal, since: datetime, *, page_size: int, page_token: str
    ) -> AuditPage:
        if not principal.platform_admin:
            raise PermissionDenied(
                "the audit log is for platform admins", rule="platform_admin_required"
            )
        limit = AUDIT_PAGE.resolve(page_size)
        scope = ("audit", since.isoformat())
        position = decode_page_token(page_token, scope) or {"after": ""}
        entries = await self._audit.list_since(since, after=str(position["after"]), limit=limit + 1)
        more = len(entries) > limit
        entries = entries[:limit]
        token = encode_page_token(scope, {"after": entries[-1].cursor}) if more else ""
        return AuditPage(entries=entries, next_page_token=token)

    async def record_audit(self, principal: Principal, record: AuditRecord) -> str:
        if not principal.service:
            raise PermissionDenied(
                "only service principals record audit events", rule="service_principal_required"
            )
        if not record.action:
            raise InvalidArgument("event.action is required", field="event.action")
        return await self._audit.append(record, at=self._clock())


def _token_tenant(principal: Principal, tenant: str) -> str:
    """The tenant a new token is for, once `principal` may create it there."""
    if not (principal.platform_admin or principal.role >= Role.ADMIN):
        raise PermissionDenied("creating tokens needs a tenant admin", rule="admin_role_required")
    if principal.service and not principal.platform_admin:
        raise PermissionDenied(
            "service principals cannot create tokens", rule="admin_role_required"
        )
    owner = tenant or principal.tenant
    if owner != principal.tenant and not principal.platform_admin:
        raise PermissionDenied(
            "you can only create tokens for your own tenant", rule="tenant_mismatch"
        )
    validate_field("tenant", owner, required=True)
    if owner == RESERVED_TENANT:
        raise InvalidArgument(f"tenant {RESERVED_TENANT!r} is reserved", field="tenant")
    return owner


def _token_ttl(ttl_seconds: int, description: str) -> timedelta:
    """A new token's lifetime (0: the default), once it and the description are in bounds."""
    if ttl_seconds < 0:
        raise InvalidArgument("ttl_seconds must be 0 (90 days) or positive", field="ttl_seconds")
    # Compared as a number first: timedelta overflows long before int64 does.
    if ttl_seconds > MAX_TOKEN_TTL.total_seconds():
        raise InvalidArgument(
            f"ttl_seconds may be at most {int(MAX_TOKEN_TTL.total_seconds())}",
            field="ttl_seconds",
        )
    if len(description) > MAX_DESCRIPTION:
        raise InvalidArgument(
            f"description may be at most {MAX_DESCRIPTION} characters", field="description"
        )
    return timedelta(seconds=ttl_seconds) if ttl_seconds else DEFAULT_TOKEN_TTL
