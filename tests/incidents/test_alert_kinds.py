"""Alert kinds are named in one place (incidents/domain/alert_kinds.py): no module of the apps spells one as a string
where it sets, filters or compares an alert's kind, so a kind renamed or added is changed there alone."""

import ast
from pathlib import Path

from incidents.domain.alert_kinds import EVIDENCE_KINDS, NODE_KINDS, RUN_STOPS, AlertKind

ROOT = Path(__file__).resolve().parents[2]
KIND_ARGUMENTS = {"kind", "kinds", "kind__in", "alerts__kind", "alerts__kind__in"}
KINDS = {kind.value for kind in AlertKind}


def _spelled(node: ast.AST) -> list[str]:
    """The alert kinds a literal spells: a string, or a tuple, list or set of them."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and i.value in KINDS]


def spelled_kinds(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and node.arg in KIND_ARGUMENTS:
            found += [(node.value.lineno, kind) for kind in _spelled(node.value)]
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "kind":
            found += [(node.lineno, kind) for other in node.comparators for kind in _spelled(other)]
    return sorted(found)


def test_no_module_spells_an_alert_kind():
    found = []
    for app in ("runs", "incidents", "fleetops"):
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts or path.name == "alert_kinds.py":
                continue
            found += [f"{path.relative_to(ROOT)}:{line}: {kind!r}" for line, kind in spelled_kinds(path.read_text())]
    assert not found, "use incidents.domain.alert_kinds.AlertKind:\n" + "\n".join(found)


def test_the_scan_finds_a_spelled_kind():
    source = 'a.filter(kind="xid")\nb.alerts_resolve(kinds=("hang", "note"))\nif alert.kind in ("sdc",): pass\n'
    assert spelled_kinds(source) == [(1, "xid"), (2, "hang"), (3, "sdc")]


def test_the_lists_are_built_from_the_kinds():
    for group in (RUN_STOPS, NODE_KINDS, EVIDENCE_KINDS):
        assert all(isinstance(kind, AlertKind) for kind in group)
    assert AlertKind.XID == "xid" and f"{AlertKind.GPU_HEALTH}" == "gpu_health"  # stored and shown as the string
