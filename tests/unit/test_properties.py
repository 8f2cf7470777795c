"""`sluice._properties`: the one .properties parser, against java.util.Properties' rules (each
expected value is what `Properties.load` gives for the same text)."""

from __future__ import annotations

import pytest

from sluice._properties import PropertiesError, parse_properties


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # separators: '=', ':', blanks, blanks around one separator; a second one is value
        (
            "a=b\nc:d\ne f\ng = h\ni : j\nk \t l",
            {"a": "b", "c": "d", "e": "f", "g": "h", "i": "j", "k": "l"},
        ),
        ("a==b\nc = = d\ne:=f\ng  :  :h", {"a": "=b", "c": "= d", "e": "=f", "g": ":h"}),
        # a key alone, with or without a separator, has the empty value
        ("lonely\nalone=\nspaced   \n", {"lonely": "", "alone": "", "spaced": ""}),
        # leading blanks skipped, trailing blanks of a value kept (Java does not trim)
        ("   \t\fkey=value  \n", {"key": "value  "}),
        # comments: '#' or '!' as first non-blank; not comments elsewhere
        ("# c\n  ! c\nk=v # not a comment\n#=x", {"k": "v # not a comment"}),
        # continuation: odd backslashes; next line's leading blanks dropped
        ("a=one \\\n    two\\\n\tthree", {"a": "one twothree"}),
        # even backslashes: an escaped backslash, no continuation
        ("a=x\\\\\nb=y", {"a": "x\\", "b": "y"}),
        # a continuation line is never a comment
        ("a=1\\\n# still a\nb=2", {"a": "1# still a", "b": "2"}),
        # a comment line ending in a backslash does not continue
        ("# comment \\\nb=2", {"b": "2"}),
        # a blank line ends a continued entry
        ("a=1\\\n\nb=2", {"a": "1", "b": "2"}),
        # a continuation on the last line keeps what came before
        ("a=1\\", {"a": "1"}),
        # line ends: \n, \r, \r\n (and only these)
        ("a=1\rb=2\r\nc=3\nd=4\x0be", {"a": "1", "b": "2", "c": "3", "d": "4\x0be"}),
        # escapes in keys and values
        ("k\\=ey\\:x\\ y=a\\tb\\nc\\rd\\fe\\qf", {"k=ey:x y": "a\tb\nc\rd\feqf"}),
        ("caf\\u00e9=\\u0041\\u00DF", {"café": "Aß"}),
        # a repeated key keeps its last value
        ("dup=1\ndup=2", {"dup": "2"}),
        ("", {}),
    ],
)
def test_java_rules(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


def test_errors_name_the_line() -> None:
    with pytest.raises(PropertiesError, match=r"^line 3: malformed \\u escape '\\\\u12x4'") as info:
        parse_properties("a=1\n\nb=\\u12x4\n")
    assert (info.value.line, info.value.reason.startswith("malformed")) == (3, True)
    with pytest.raises(PropertiesError, match=r"^line 2: malformed \\u escape"):
        parse_properties("a=1\nb=\\u00")  # too short
    with pytest.raises(PropertiesError, match=r"^line 1: an entry has no key: '= v'"):
        parse_properties("= v\n")
    with pytest.raises(PropertiesError, match=r"^line 2: an entry has no key"):
        parse_properties("# c\n:x\n")
