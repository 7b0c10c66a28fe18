"""The udev rules parser: every supported construct, and every error with its line."""
from __future__ import annotations

import pytest

from kmd_fuse.udev.rules import RuleSet, RulesSyntaxError, Token, parse_rules


def test_comments_blank_lines_and_line_numbers() -> None:
    rules = parse_rules('# a comment\n\n   # indented comment\nKERNEL=="npu0", MODE="0600"\n\n'
                        'KERNEL=="npu1", MODE="0640"\n', "x.rules")
    assert [(r.file, r.line) for r in rules] == [("x.rules", 4), ("x.rules", 6)]
    assert rules[0].matches == (Token("KERNEL", None, "==", "npu0"),)
    assert [(t.key, t.op, t.value) for t in rules[1].assigns] == [("MODE", "=", "0640")]


def test_line_continuation_joins_and_reports_first_line() -> None:
    text = 'KERNEL=="npu*", \\\n    GROUP="video", \\\n    MODE="0660"\nKERNEL=="x", MODE="0600"\n'
    rules = parse_rules(text, "c.rules")
    assert [r.line for r in rules] == [1, 4]
    assert [t.key for t in rules[0].assigns] == ["GROUP", "MODE"]


def test_comment_ending_in_backslash_does_not_continue() -> None:
    rules = parse_rules('# comment \\\nKERNEL=="a", MODE="0600"\n')
    assert len(rules) == 1 and rules[0].line == 2


def test_all_operators_and_keys() -> None:
    text = ('ACTION=="add|change", SUBSYSTEM!="usb", KERNEL=="npu[0-9]*", DEVPATH=="/devices/*", '
            'ENV{FOO}=="1", ATTR{model}!="", OWNER:="root", GROUP="video", MODE:="0640", '
            'SYMLINK+="a", SYMLINK="c", SYMLINK:="d", ENV{X}="1", ENV{Y}+="2"')
    rule = parse_rules(text)[0]
    assert [(t.key, t.name, t.op) for t in rule.matches] == [
        ("ACTION", None, "=="), ("SUBSYSTEM", None, "!="), ("KERNEL", None, "=="),
        ("DEVPATH", None, "=="), ("ENV", "FOO", "=="), ("ATTR", "model", "!=")]
    assert [(t.key, t.name, t.op) for t in rule.assigns] == [
        ("OWNER", None, ":="), ("GROUP", None, "="), ("MODE", None, ":="), ("SYMLINK", None, "+="),
        ("SYMLINK", None, "="), ("SYMLINK", None, ":="), ("ENV", "X", "="), ("ENV", "Y", "+=")]


def test_whitespace_around_operators_and_escapes_in_values() -> None:
    rule = parse_rules(r'KERNEL == "a\"b" ,ENV{K}  =  "x\\y"')[0]
    assert rule.matches[0].value == 'a"b'
    assert rule.assigns[0].value == "x\\y"


def test_substitutions_are_parsed_into_parts() -> None:
    tok = parse_rules('KERNEL=="*", SYMLINK+="a/$kernel-%n-$env{ID}-%s{model}-$$-%%-$number%k"')[0].assigns[0]
    assert tok.parts == ("a/", ("k", ""), "-", ("n", ""), "-", ("E", "ID"), "-", ("s", "model"),
                         "-$-%-", ("n", ""), ("k", ""))
    all_long = parse_rules('ENV{A}="$devpath$major$minor$devnode$name$links$root$sys$attr{x}"')[0]
    assert [p[0] for p in all_long.assigns[0].parts] == ["p", "M", "m", "N", "name", "links", "r", "S", "s"]
    prefix = parse_rules('ENV{A}="$kernelX$numbers"')[0].assigns[0]
    assert prefix.parts == (("k", ""), "X", ("n", ""), "s")
    all_short = parse_rules('ENV{A}="%p%M%m%N%r%S%E{B}"')[0]
    assert [p[0] for p in all_short.assigns[0].parts] == ["p", "M", "m", "N", "r", "S", "E"]


def test_label_and_forward_goto_resolve_to_index() -> None:
    rules = parse_rules('SUBSYSTEM!="npu", GOTO="end"\nKERNEL=="npu0", MODE="0600"\nLABEL="end"\n')
    assert rules[0].goto == "end" and rules[0].goto_index == 2
    assert rules[2].label == "end" and not rules[2].matches and not rules[2].assigns


def test_goto_index_is_offset_across_files(tmp_path) -> None:
    (tmp_path / "10-a.rules").write_text('KERNEL=="x", MODE="0600"\n')
    (tmp_path / "20-b.rules").write_text('SUBSYSTEM!="npu", GOTO="e"\nMODE="0640"\nLABEL="e"\n')
    (tmp_path / "not-rules.txt").write_text("garbage")
    rs = RuleSet.load(tmp_path)
    assert [f.rsplit("/", 1)[1] for f in rs.files] == ["10-a.rules", "20-b.rules"]
    assert rs.rules[1].goto_index == 3


@pytest.mark.parametrize("text, line, message", [
    ('KERNEL=="a", RUN+="/bin/true"', 1, "key RUN is valid udev but not supported"),
    ('\n\nKERNELS=="a"', 3, "key KERNELS is valid udev but not supported"),
    ('FOO=="a"', 1, "unknown key FOO"),
    ('KERNEL="a"', 1, "KERNEL can only be matched"),
    ('MODE=="0600"', 1, "MODE cannot be matched"),
    ('MODE+="0600"', 1, "operator += is not valid for MODE"),
    ('GROUP-="x"', 1, "operator -= is not valid for GROUP"),
    ('SYMLINK-="x"', 1, "operator -= is not valid for SYMLINK"),
    ('ENV{A}:="x"', 1, "operator := is not valid for ENV"),
    ('LABEL:="x"', 1, "operator := is not valid for LABEL"),
    ('KERNEL=="a" MODE="0600"', 1, "expected ',' between keys"),
    ('KERNEL=="a",', 1, "trailing ','"),
    ('KERNEL==a', 1, "must be in double quotes"),
    ('KERNEL=="abc', 1, "unterminated value"),
    ('KERNEL "a"', 1, "expected an operator"),
    ('"a"', 1, "expected a key"),
    ('ENV=="a"', 1, "ENV needs a {name}"),
    ('ATTR{}=="a"', 1, "ATTR needs a {name}"),
    ('KERNEL{x}=="a"', 1, "KERNEL takes no {name}"),
    ('ATTR{../etc/passwd}=="a"', 1, "bad attribute name"),
    ('ENV{A-B}="1"', 1, "bad ENV key name"),
    ('MODE="rw"', 1, "MODE must be octal"),
    ('MODE="06600"', 1, "MODE must be octal"),
    ('SYMLINK+="$foo"', 1, "unknown substitution $foo"),
    ('SYMLINK+="$result"', 1, "substitution $result is not supported"),
    ('SYMLINK+="$sysfs{model}"', 1, "substitution $sysfs is not supported"),
    ('SYMLINK+="$"', 1, "unknown substitution $"),
    ('SYMLINK+="$-"', 1, "unknown substitution $-"),
    ('SYMLINK+="%c"', 1, "unknown or unsupported substitution %c"),
    ('SYMLINK+="$env"', 1, "needs {name}"),
    ('SYMLINK+="%s{/abs}"', 1, "bad attribute name"),
    ('GOTO="nowhere"', 1, "GOTO 'nowhere' has no matching LABEL"),
    ('LABEL="a"\nGOTO="a"', 2, "jumps backwards"),
    ('LABEL="a"\nLABEL="a"', 2, "LABEL 'a' already defined at line 1"),
    ('LABEL="a", LABEL="b"', 1, "more than one LABEL"),
    ('GOTO="a", GOTO="a"\nLABEL="a"', 1, "more than one GOTO"),
    ('LABEL="a b"', 1, "bad LABEL name"),
    ('KERNEL=="a", \\', 1, "line continuation at end of file"),
])
def test_errors_name_file_and_line(text: str, line: int, message: str) -> None:
    with pytest.raises(RulesSyntaxError) as info:
        parse_rules(text, "bad.rules")
    assert info.value.file == "bad.rules" and info.value.line == line
    assert message in info.value.message
    assert str(info.value).startswith(f"bad.rules:{line}: ")


def test_load_reports_unreadable_and_binary_files(tmp_path) -> None:
    from kmd_fuse.udev.rules import UdevRulesError

    with pytest.raises(UdevRulesError, match="missing.rules: cannot read rules file"):
        RuleSet.load(tmp_path / "missing.rules")
    (tmp_path / "bin.rules").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UdevRulesError, match="bin.rules: not UTF-8"):
        RuleSet.load(tmp_path / "bin.rules")


def test_the_shipped_rules_file_parses() -> None:
    from kmd_fuse.udev.rules import default_rules_path, load_rules

    path = default_rules_path()
    assert path.name == "70-npu.rules"
    rs = load_rules()
    assert rs.files == (str(path),)
    keys = {t.key for r in rs.rules for t in r.matches + r.assigns}
    assert {"SUBSYSTEM", "KERNEL", "ACTION", "MODE", "GROUP", "OWNER", "SYMLINK"} <= keys
    assert any(r.goto for r in rs.rules) and any(r.label for r in rs.rules)
