"""Failures are values with codes from ``codes.py``; code never branches on message text
(issue #26 item 6, the brief's rule 5).

Every module of the package is read with ``ast`` (as ``tests/test_layering.py`` reads imports)
and these are refused, each at the function it is in:

* text tested against an exception's message: a string constant ``in``/``==`` ``str(e)`` or
  ``e.args``, ``str(e).startswith(...)``, ``re.search(..., str(e))``;
* ``startswith``/``endswith``/``in``/``re`` over a string named like prose (``reason``,
  ``message``, ``msg``, ``detail``, ``error``, ``err``, ``why``, ``text``, ``strerror``), an
  attribute or a key of that name included (``out.reason``, ``r["why"]``, ``r.get("why")``);
* a code spelled as a string literal in a comparison (``o.status == "verified"``,
  ``err.code != "not_found"``): the value of a ``codes.py`` member compared with something
  named ``code``/``status``/``action``: spell it by its member, so a renamed or mistyped code
  fails at import, not silently;
* a code flattened into prose: an f-string that starts ``f"{code}: ..."``;
* a code given as a string literal: the value of a ``"code"`` key or a ``code=`` keyword (itself,
  an alternative of ``or``, a branch of a conditional expression) is a ``codes.py`` member, never
  a literal, let alone one that is no ``codes.py`` value (a code made up where it is used).

Where a third-party library gives only text, or data written before codes existed carries only
prose, the decision lives in ONE function named for it, listed in ``ALLOWED`` with why; every
entry there must still match a site (a stale entry fails too).
"""
import ast
import os
import re
import sys
from typing import Dict, Iterator, List, Optional, Set, Tuple

PKG = "tb_footprint_plugin"
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), PKG)

#: (module path relative to the package, function) -> why that one function may read text
ALLOWED: Dict[Tuple[str, str], str] = {
    ("engine/ledger_entries.py", "_skip_code"):
        "ledger entries written before codes existed carry only the reason's prose: its two "
        "passing reasons are mapped to Skip codes here, once, for old ledgers",
    ("engine/reduce_journal.py", "journal_gone"):
        "composes the run's reason (does not repeat the journal's own words when the step's "
        "failure already is them); status and code come from gone.code, not from the text",
    ("scan/eventfile.py", "_detail"):
        "presentation: strips the file name the record reader's own message starts with",
    ("verify/records.py", "describe"):
        "presentation: strips the file name the record reader's own message starts with",
    ("verify/compare.py", "_merge_route_lines"):
        "presentation: merges the verification's own ok lines that differ only by backend",
    ("verify/compare.py", "_merge_same"):
        "presentation: merges the verification's own ok lines that differ only by backend",
}

_PROSE = re.compile(r"(^|_)(reason|message|msg|detail|details|error|err|why|text|strerror)$")
_CODED = re.compile(r"(^|_)(code|status|action|outcome)$")
#: names an exception is bound to (``except X as e``): ``str(e)``, ``e.args`` are its message
_EXC = re.compile(r"^(e|ex|exc|err|error|exception|cause)\d*$|_(e|exc|err|error)$")
_RE_FUNCS = {"search", "match", "fullmatch", "findall", "finditer", "sub", "split"}


def _code_values() -> Set[str]:
    sys.path.insert(0, os.path.dirname(ROOT))
    try:
        from tb_footprint_plugin import codes
    finally:
        sys.path.pop(0)
    out: Set[str] = set()
    for name in codes.__all__:
        obj = getattr(codes, name)
        if isinstance(obj, type) and issubclass(obj, codes.Code) and obj is not codes.Code:
            out |= {m.value for m in obj}
    return out


CODE_VALUES = _code_values()


def _name_of(node: ast.AST) -> Optional[str]:
    """The name a value is known by: ``x``, ``a.x``, ``a["x"]``, ``a.get("x")``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        key = node.slice
        if isinstance(key, ast.Index):  # Python < 3.9
            key = key.value  # type: ignore[attr-defined]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
        return _name_of(node.args[0])  # ``str(o.get("outcome"))``
    if isinstance(node, ast.BoolOp):  # ``r.get("why") or ""``
        for v in node.values:
            n = _name_of(v)
            if n:
                return n
    return None


def _exception_text(node: ast.AST) -> bool:
    """``str(e)`` or ``e.args`` / ``e.args[i]`` of a name an exception is bound to: its message."""
    def exc(n: ast.AST) -> bool:
        return isinstance(n, ast.Name) and bool(_EXC.search(n.id))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
        return exc(node.args[0])
    if isinstance(node, ast.Subscript):
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "args" and exc(node.value)


def _prose(node: ast.AST) -> bool:
    if _exception_text(node):
        return True
    name = _name_of(node)
    return bool(name and _PROSE.search(name))


def _text_const(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_text_const(e) for e in node.elts)
    return False


def _code_consts(node: ast.AST) -> List[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in CODE_VALUES:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [v for e in node.elts for v in _code_consts(e)]
    return []


#: names a code is given under (a dict's key, a keyword): its literal must be a ``codes.py`` value
_CODE_KEY = re.compile(r"^(reason_)?code$")


def _given_literals(node: ast.AST) -> List[str]:
    """The string literals ``node`` may evaluate to as a whole: itself, an alternative of ``or`` /
    ``and``, a branch of a conditional expression (``getattr(e, "code", None) or "x"``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.BoolOp):
        return [v for e in node.values for v in _given_literals(e)]
    if isinstance(node, ast.IfExp):
        return _given_literals(node.body) + _given_literals(node.orelse)
    return []


def _literal_code(node: ast.AST) -> Optional[str]:
    """What is wrong with the literals ``node`` gives as a code, or None: one that is no
    ``codes.py`` value is a code made up where it is used; one that is, is spelled by its member."""
    lits = _given_literals(node)
    made_up = [v for v in lits if v not in CODE_VALUES]
    if made_up:
        return f"a code not in codes.py: {made_up}"
    return f"code spelled as a literal: {lits}" if lits else None


def _findings(tree: ast.AST) -> Iterator[Tuple[int, str, str]]:
    """(line, enclosing function, what) for each refused pattern."""
    def walk(node: ast.AST, func: str) -> Iterator[Tuple[int, str, str]]:
        for child in ast.iter_child_nodes(node):
            f = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            yield from check(child, func)
            yield from walk(child, f)

    def check(node: ast.AST, func: str) -> Iterator[Tuple[int, str, str]]:
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare):
            sides = [node.left] + list(node.comparators)
            for op, left, right in zip(node.ops, sides, sides[1:]):
                if isinstance(op, (ast.In, ast.NotIn)):
                    if _text_const(left) and _prose(right):
                        yield line, func, "text tested against a message (in)"
                elif isinstance(op, (ast.Eq, ast.NotEq)):
                    for a, b in ((left, right), (right, left)):
                        if _exception_text(a) and _text_const(b):
                            yield line, func, "an exception's message compared with text"
                if isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                    for a, b in ((left, right), (right, left)):
                        name = _name_of(a)
                        vals = _code_consts(b)
                        if name and _CODED.search(name) and vals:
                            yield line, func, f"code spelled as a literal: {name} vs {vals}"
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and _CODED.search(k.value) \
                        and _code_consts(v):
                    yield line, func, f"code spelled as a literal: {k.value!r}: {_code_consts(v)}"
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and _CODE_KEY.search(k.value) \
                        and _literal_code(v):
                    yield line, func, f"{k.value!r}: {_literal_code(v)}"
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg and _CODED.search(kw.arg) and _code_consts(kw.value):
                    yield line, func, f"code spelled as a literal: {kw.arg}={_code_consts(kw.value)}"
                if kw.arg and _CODE_KEY.search(kw.arg) and _literal_code(kw.value):
                    yield line, func, f"{kw.arg}=: {_literal_code(kw.value)}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr in ("startswith", "endswith") and _prose(node.func.value):
                yield line, func, f"{attr} on a message"
            if attr in _RE_FUNCS and isinstance(node.func.value, ast.Name) and node.func.value.id == "re" \
                    and len(node.args) >= 2 and _prose(node.args[1]):
                yield line, func, f"re.{attr} over a message"
        elif isinstance(node, ast.JoinedStr) and len(node.values) >= 2:
            first, second = node.values[0], node.values[1]
            if isinstance(first, ast.FormattedValue) and (_name_of(first.value) or "").endswith("code") \
                    and isinstance(second, ast.Constant) and str(second.value).startswith(": "):
                yield line, func, "a code flattened into prose (f\"{code}: ...\")"

    yield from walk(tree, "<module>")


def _modules() -> Iterator[Tuple[str, str]]:
    for dirpath, _, files in os.walk(ROOT):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
                if rel != "codes.py":
                    yield rel, path


def scan() -> Tuple[List[str], Set[Tuple[str, str]]]:
    """The refused sites, and the allow-listed (module, function) pairs that matched."""
    bad, used = [], set()
    for rel, path in _modules():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for line, func, what in _findings(tree):
            if (rel, func) in ALLOWED:
                used.add((rel, func))
            else:
                bad.append(f"{rel}:{line} in {func}: {what}")
    return bad, used


def test_no_branch_on_message_text():
    bad, _ = scan()
    assert not bad, "branches on prose or codes spelled as text (carry a code and branch on it):\n" + "\n".join(bad)


def test_every_allowed_site_is_still_there():
    _, used = scan()
    assert set(ALLOWED) - used == set(), f"allow-list entries that match nothing: {sorted(set(ALLOWED) - used)}"


def _flags(src: str) -> List[str]:
    return [what for _, _, what in _findings(ast.parse(src))]


def test_the_scanner_sees_each_pattern():
    """Each refused pattern is seen (so the scan can fail), and a branch on a code is not."""
    assert _flags('def f(e):\n    if "Forbidden" in str(e): pass')
    assert _flags('def f(e):\n    if str(e) == "boom": pass')
    assert _flags('def f(e):\n    if "x" in e.args: pass')
    assert _flags('def f(out):\n    if out.reason.startswith("locked"): pass')
    assert _flags('def f(r):\n    if r.get("why", "").startswith("at most"): pass')
    assert _flags('def f(r):\n    if "active" in r["error"]: pass')
    assert _flags('import re\ndef f(e):\n    re.search("denied", str(e))')
    assert _flags('def f(o):\n    if o.status == "verified": pass')
    assert _flags('def f(err):\n    if err.code in ("not_found", "x"): pass')
    assert _flags('def f(code, e):\n    reason = f"{code}: {e}"')
    assert _flags('def f(p):\n    return {"op": p, "code": "unfinished_operation"}')
    assert _flags('def f(p):\n    return RunOutcome(p, status="verified")')
    assert _flags('def f(e):\n    return {"code": getattr(e, "code", None) or "made_up_here"}')
    assert _flags('def f(e, ok):\n    return Problem(code=Failure.ERROR if ok else "made_up_here")')
    assert _flags('def f(e):\n    return {"code": getattr(e, "code", None) or "damaged_state_file"}')
    assert _flags('def f(h):\n    raise Rejected(403, f"bad host {h}", reason_code="foreign_host")')
    assert not _flags('def f(e):\n    return {"code": getattr(e, "code", None) or Finding.DAMAGED_FILE}')
    assert not _flags('def f(o):\n    if o.status == Outcome.VERIFIED: pass')
    assert not _flags('def f(e):\n    if e.errno == errno.ENOENT: pass')
    assert _flags('def f(o):\n    if str(o.get("outcome")) == "verified": pass')
    assert not _flags('def f(o):\n    if o.kind == "verified": pass')
    assert not _flags('def f(d, p):\n    if str(d.get("kept")).startswith(p): pass')
    assert not _flags('def f(request):\n    if "q" in request.args: pass')
