"""One authorization door: use cases ask the Authorizer about actions (Action.*), never
about gRPC methods. Which RPC takes which action is the edge's table (RPC_ACTIONS in
engram.domain.policy, read by the server's start-up check and the authorization matrix);
a use case that names an RPC, reads the RPC table or checks a row by hand fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SERVICES = Path(__file__).resolve().parents[2] / "services" / "engram"
# The packages whose modules hold use cases (and their adapters).
USE_CASE_PACKAGES = (
    "storage",
    "quota",
    "authz",
    "maintenance",
    "indexer",
    "search",
    "workspace",
    "events",
    "indexes",
)
# The edge of each package: protobuf in and out, where RPCs are named.
EDGE_MODULES = {"servicer.py", "mapping.py"}
# The policy table itself and the names only the edge may read.
EDGE_NAMES = {"RPC_POLICY", "RPC_ACTIONS", "admits", "authorize_rpc", "unlisted_methods"}
# The door's methods: their action argument (second positional) must be an Action.
DOOR_CALLS = {"authorize": 1, "permits": 1, "decide": 1}


def use_case_modules() -> list[Path]:
    return sorted(
        path
        for package in USE_CASE_PACKAGES
        for path in (SERVICES / package).rglob("*.py")
        if path.name not in EDGE_MODULES
    )


def violations(source: str) -> list[str]:
    """Where `source` names a gRPC method, reads the RPC policy table, or asks the door
    about something that is not an Action."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "/engram.v1." in node.value
        ):
            found.append(f"line {node.lineno}: names the gRPC method {node.value!r}")
        elif isinstance(node, ast.Name) and node.id in EDGE_NAMES:
            found.append(f"line {node.lineno}: uses {node.id}")
        elif isinstance(node, ast.alias) and node.name in EDGE_NAMES:
            found.append(f"imports {node.name}")
        elif isinstance(node, ast.Call):
            found.extend(_door_call_problems(node))
    return found


def _door_call_problems(call: ast.Call) -> list[str]:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    position = DOOR_CALLS.get(name)
    if position is None or len(call.args) <= position:
        return []
    action = call.args[position]
    if isinstance(action, ast.Constant) or isinstance(action, ast.JoinedStr):
        return [f"line {call.lineno}: asks {name} about {ast.unparse(action)}, not an Action"]
    return []


def test_no_use_case_names_a_grpc_method_in_a_policy_check() -> None:
    modules = use_case_modules()
    assert len(modules) > 50, "the scan found the service packages"
    problems = [
        f"{path.relative_to(SERVICES)} {problem}"
        for path in modules
        for problem in violations(path.read_text(encoding="utf-8"))
    ]
    assert not problems, "\n".join(problems)


def test_the_check_catches_a_policy_check_by_rpc_name() -> None:
    """What the four use cases did before: each form is caught."""
    by_table = (
        "from engram.domain.policy import RPC_POLICY, admits\n"
        "RECONCILE_RPC = '/engram.v1.QuotaService/Reconcile'\n"
        "def reconcile(principal, target):\n"
        "    return admits(RPC_POLICY[RECONCILE_RPC][target], principal, target)\n"
    )
    assert len(violations(by_table)) >= 4
    by_string = "async def f(door, p, s):\n    await door.authorize(p, 'ReadDocument', s)\n"
    assert violations(by_string) == ["line 2: asks authorize about 'ReadDocument', not an Action"]
    by_action = "async def f(door, p, s):\n    await door.authorize(p, Action.READ, s)\n"
    assert violations(by_action) == []


def test_every_action_and_every_rpc_has_a_row() -> None:
    from engram.domain.policy import ACTION_POLICY, RPC_ACTIONS, RPC_POLICY
    from engram.domain.principals import Action

    assert set(ACTION_POLICY) == set(Action), "an action without a row is nobody's"
    assert set(RPC_POLICY) == set(RPC_ACTIONS)
    for rpc, action in RPC_ACTIONS.items():
        assert RPC_POLICY[rpc] is ACTION_POLICY[action], rpc
