"""Schema ``pattern``s matched by RE2: time linear in the answer's length, so no answer can stall the server.

Python's ``re`` backtracks: ``(\\w+\\s?)+$`` against 27 characters took 17 s on the
event loop. RE2 (``google-re2``) never backtracks, and lacks exactly the
constructs that need it; a pattern using one is refused at create with the reason.

The dialect is RE2's, which agrees with ECMA-262 (JSON Schema's) on what agents
write: ``\\d`` and ``\\w`` are ASCII, ``$`` is the end of the text, ``\\p{L}``
works, and ECMA's ``\\uXXXX`` / ``\\u{X…}`` escapes are read as code points.
"""

from __future__ import annotations

import functools
import re

import re2

__all__ = ["MAX_PROGRAM_SIZE", "PatternError", "compile_pattern", "pattern_cost", "pattern_search"]

# RE2 is linear in the text, times a factor that grows with the compiled program: about
# 0.3 ms per 64 KB of answer per 1,000 instructions in the worst case measured. This
# bounds that factor; ``\p{L}`` alone is 1,200, ``^[0-9]{6}$`` about 20.
MAX_PROGRAM_SIZE = 2000

# RE2's compile errors for the constructs it lacks, in words a caller can act on.
_CONSTRUCTS: tuple[tuple[str, str], ...] = (
    ("invalid perl operator: (?=", "a lookahead (?=…)"),
    ("invalid perl operator: (?!", "a negative lookahead (?!…)"),
    ("invalid perl operator: (?<=", "a lookbehind (?<=…)"),
    ("invalid perl operator: (?<!", "a negative lookbehind (?<!…)"),
    ("invalid perl operator: (?>", "an atomic group (?>…)"),
    ("invalid perl operator: (?P", "a named backreference (?P=…)"),
    ("invalid escape sequence: \\k", "a named backreference \\k<…>"),
    ("invalid escape sequence: \\c", "a control escape \\cX"),
    ("bad repetition operator: ", "a possessive repetition (*+, ++, ?+)"),
)
_QUOTED_CHARS = 80
_WHY = ("patterns are matched by RE2, in time linear in the answer, so backreferences, "
        "lookahead, lookbehind, atomic groups and possessive repetitions are not supported")


def _reason(message: str) -> str:
    if message.startswith("invalid escape sequence: \\") and message[-1:] in "123456789":
        return f"pattern uses a backreference ({message[-2:]}); {_WHY}"
    for prefix, construct in _CONSTRUCTS:
        if message.startswith(prefix):
            return f"pattern uses {construct}; {_WHY}"
    # RE2 quotes the part of the pattern it stopped at, which may be most of an 8 KB pattern: cut short.
    if len(message) > _QUOTED_CHARS:
        message = message[:_QUOTED_CHARS - 1] + "…"
    if "too large" in message:
        return f"pattern is too complex to match quickly ({message})"
    return f"pattern does not compile: {message}"


class PatternError(ValueError):
    """A pattern this server will not match; ``str(error)`` says why, for the agent that wrote it."""


def _options() -> re2.Options:
    options = re2.Options()
    # RE2 prints compile errors to stderr by default; ours reach the caller instead.
    options.log_errors = False
    return options


_OPTIONS = _options()
_BRACED_CODE_POINT = re.compile(r"\{([0-9A-Fa-f]{1,6})\}")


def _to_re2(pattern: str) -> str:
    """ECMA-262's ``\\uXXXX`` and ``\\u{X…}`` as RE2's ``\\x{…}``; every other escape as it is."""
    if "\\u" not in pattern:
        return pattern
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch != "\\" or i + 1 >= len(pattern):
            out.append(ch)
            i += 1
            continue
        nxt = pattern[i + 1]
        if nxt == "u":
            braced = _BRACED_CODE_POINT.match(pattern, i + 2)
            if braced:
                out.append(f"\\x{{{braced.group(1)}}}")
                i = braced.end()
                continue
            digits = pattern[i + 2:i + 6]
            if len(digits) == 4 and all(c in "0123456789abcdefABCDEF" for c in digits):
                out.append(f"\\x{{{digits}}}")
                i += 6
                continue
        out.append(pattern[i:i + 2])
        i += 2
    return "".join(out)


@functools.lru_cache(maxsize=512)
def compile_pattern(pattern: str) -> re2._Regexp:
    """The compiled pattern, or ``PatternError`` with the reason it is refused."""
    try:
        compiled = re2.compile(_to_re2(pattern), _OPTIONS)
    except re2.error as e:
        message = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise PatternError(_reason(message)) from None
    except (UnicodeEncodeError, TypeError) as e:
        raise PatternError(f"pattern does not compile: {e}") from None
    if compiled.programsize > MAX_PROGRAM_SIZE:
        raise PatternError(
            f"pattern is too complex to match quickly (RE2 program of {compiled.programsize} steps; "
            f"at most {MAX_PROGRAM_SIZE}): use minLength/maxLength for lengths rather than .{{m,n}}"
        )
    return compiled


def pattern_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches anywhere in ``text`` (JSON Schema's ``pattern`` is unanchored)."""
    try:
        return compile_pattern(pattern).search(text) is not None
    except UnicodeEncodeError:
        # A lone surrogate is not text: nothing matches it (the validator reports it on its own).
        return False


def pattern_cost(pattern: str, length: int) -> int:
    """A bound, in RE2 steps, on matching ``pattern`` against ``length`` characters (0 when refused)."""
    try:
        return compile_pattern(pattern).programsize * max(length, 1)
    except PatternError:
        return 0
