"""Human formatting for terminal output: sizes, shares and proportional bars."""
from __future__ import annotations

_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KB' (decimal units, as du -h --si and most UIs show)."""
    n = float(n)
    for unit in _UNITS:
        if abs(n) < 1000 or unit == _UNITS[-1]:
            return f"{int(n)} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} PB"


def parse_size(text: str) -> int:
    """'100MB' / '1.5 GB' / '2048' -> bytes; raises ValueError naming the bad text."""
    t = text.strip().upper().replace(" ", "")
    mult = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6, "G": 10**9,
            "GB": 10**9, "T": 10**12, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
    num = t.rstrip("KMGTIB")
    unit = t[len(num):]
    try:
        if unit not in mult or not num:
            raise ValueError
        return int(float(num) * mult[unit])
    except ValueError:
        raise ValueError(f"not a size: {text!r} (a number with an optional unit: 2048, 100MB, 1.5GB, 512KiB)") from None


def parse_duration(text: str) -> float:
    """'14d' / '12h' / '30m' / '45s' / '90' (seconds) -> seconds; ValueError on bad text."""
    t = text.strip().lower()
    mult = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    try:
        if t and t[-1] in mult:
            return float(t[:-1]) * mult[t[-1]]
        return float(t)
    except ValueError:
        raise ValueError(f"not a duration: {text!r} (a number with an optional unit s, m, h, d or w: "
                         "90, 30m, 12h, 14d)") from None


def share(part: float, whole: float) -> str:
    """Percentage with one decimal, '<0.1%' for a small non-zero share and '—' for an empty whole
    (as the tab writes them), right-aligned in 6 columns."""
    if not whole:
        return "—".rjust(6)
    p = 100.0 * part / whole
    return ("<0.1%" if 0 < p < 0.05 else f"{p:.1f}%").rjust(6)


def plural(n: int, word: str, many: str = "") -> str:
    """'1 tag', '3 tags' (``many`` for irregular plurals)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def bar(part: float, whole: float, width: int = 20) -> str:
    """A proportional bar with eighth-block resolution, padded to ``width``."""
    if not whole or part <= 0:
        return " " * width
    eighths = round(8 * width * part / whole)
    full, rem = divmod(eighths, 8)
    s = "█" * full + ("" if rem == 0 else "▏▎▍▌▋▊▉"[rem - 1])
    return s[:width].ljust(width)


def shown(name: object) -> str:
    """A name (a run, a path) as one printable line: a byte not valid UTF-8 (held as a surrogate)
    as ``\\xNN`` and a control character (a newline, a tab, an escape) as its escape, so a run
    named with a newline stays one row of a table and cannot move the terminal's cursor. Only for
    display: the name itself (``--json``, the api) is unchanged."""
    text = str(name)
    if text.isprintable():
        return text  # nearly every name: no copy
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


#: what a spreadsheet reads as the start of a formula (OWASP's CSV injection list)
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A value as a CSV cell a spreadsheet shows as text: a string beginning with = + - @, a tab
    or a carriage return gets a leading ``'`` (a run named ``=HYPERLINK(...)`` in a shared logdir
    is not evaluated when the owner opens the file); numbers and other values unchanged. The one
    rule of every CSV the package writes; ``--json`` and the api keep names as they are."""
    return "'" + value if isinstance(value, str) and value.startswith(_FORMULA_STARTS) else value
