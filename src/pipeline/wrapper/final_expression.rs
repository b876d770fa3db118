//! Where a Python cell's final expression statement is, worked out on the host, so that the
//! driver can compile the cell without Python's `ast` module.
//!
//! A cell that ends in an expression statement gives that expression's value, as the REPL
//! does. The driver used to find that statement by parsing every cell into Python AST
//! objects: importing `_ast` costs a session's first cell 0.6 ms (it builds every node
//! class), and the round trip through AST objects about 7 us per warm cell. With this hint
//! (a field of the request header) the driver compiles the cell's text as it is: the whole
//! cell when it does not end in an expression, or the text before the expression and the
//! expression on its own.
//!
//! The hint is a fast path, never the authority: the driver falls back to `ast` when the
//! hint is unknown (`?`), when either part does not compile, or when what follows the
//! expression is more than blanks, a `;` and comments. The host says "no final expression"
//! (`-`) only for a tree tree-sitter parsed without an error whose last statement is not an
//! expression statement, and unknown for a cell with a carriage return (CPython counts a lone
//! `\r` as a line end, which the line numbers of the expression's part would then miss) or
//! one larger than [`MAX_HINTED_BYTES`].

use std::ops::Range;

/// Cells larger than this get no hint (the parse would cost the host more than `ast` costs
/// the driver).
pub const MAX_HINTED_BYTES: usize = 1 << 20;

/// The kinds of tree-sitter-python's statements, other than expression statements, that are
/// statements to CPython as well.
const STATEMENTS: &[&str] = &[
    "import_statement",
    "import_from_statement",
    "future_import_statement",
    "assert_statement",
    "return_statement",
    "delete_statement",
    "raise_statement",
    "pass_statement",
    "break_statement",
    "continue_statement",
    "global_statement",
    "nonlocal_statement",
    "type_alias_statement",
    "if_statement",
    "for_statement",
    "while_statement",
    "try_statement",
    "with_statement",
    "match_statement",
    "function_definition",
    "class_definition",
    "decorated_definition",
];

/// A Python cell's final expression statement, as the request header carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinalExpression {
    /// Not worked out: the driver parses the cell with `ast` (header field `?`).
    Unknown,
    /// The cell does not end in an expression statement (`-`).
    Absent,
    /// The expression statement's byte range in the cell (`START:END`).
    At(Range<usize>),
}

impl FinalExpression {
    /// The header field.
    pub fn header_field(&self) -> String {
        match self {
            FinalExpression::Unknown => "?".to_string(),
            FinalExpression::Absent => "-".to_string(),
            FinalExpression::At(r) => format!("{}:{}", r.start, r.end),
        }
    }
}

/// Whether a hint is worked out for `code` at all (see the module's notes).
fn hintable(code: &str) -> bool {
    code.len() <= MAX_HINTED_BYTES && !code.contains('\r')
}

/// The final expression statement of Python `code`.
pub fn python_final_expression(code: &str) -> FinalExpression {
    if !hintable(code) {
        return FinalExpression::Unknown;
    }
    let mut parser = tree_sitter::Parser::new();
    if parser
        .set_language(&tree_sitter_python::LANGUAGE.into())
        .is_err()
    {
        return FinalExpression::Unknown;
    }
    let Some(tree) = parser.parse(code, None) else {
        return FinalExpression::Unknown;
    };
    from_python_tree(&tree, code)
}

/// The same, from the tree tree-sitter-python made of exactly `code`: the analyzer's, so that
/// a cell is parsed once rather than twice (`analyzer::Screening::final_expression`).
pub fn from_python_tree(tree: &tree_sitter::Tree, code: &str) -> FinalExpression {
    if !hintable(code) {
        return FinalExpression::Unknown;
    }
    let root = tree.root_node();
    if root.kind() != "module" || root.has_error() {
        return FinalExpression::Unknown;
    }
    let mut cursor = root.walk();
    let last = root
        .named_children(&mut cursor)
        .filter(|n| !n.is_extra())
        .last();
    let Some(last) = last else {
        return FinalExpression::Absent;
    };
    if last.kind() != "expression_statement" {
        // Only statements CPython has too: tree-sitter also knows Python 2's `print x` and
        // `exec code`, and reads `print >> f` (a shift to CPython) as one of them.
        return if STATEMENTS.contains(&last.kind()) {
            FinalExpression::Absent
        } else {
            FinalExpression::Unknown
        };
    }
    // tree-sitter's expression_statement also holds assignments (`x = 1`, `x += 1`, `x: int`),
    // which are not expressions to CPython, and a bare `yield` (an expression CPython refuses
    // outside a function: its error is `ast`'s to give).
    let mut cursor = last.walk();
    let mut kinds = last.named_children(&mut cursor).map(|n| n.kind());
    if kinds.any(|k| k == "yield") {
        return FinalExpression::Unknown;
    }
    let mut cursor = last.walk();
    let mut kinds = last.named_children(&mut cursor).map(|n| n.kind());
    if kinds.any(|k| k == "assignment" || k == "augmented_assignment") {
        return FinalExpression::Absent;
    }
    FinalExpression::At(last.byte_range())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(code: &str) -> Option<&str> {
        match python_final_expression(code) {
            FinalExpression::At(r) => Some(&code[r]),
            FinalExpression::Absent => None,
            FinalExpression::Unknown => Some("?"),
        }
    }

    #[test]
    fn statements_and_expressions() {
        assert_eq!(at("pass"), None);
        assert_eq!(at(""), None);
        assert_eq!(at("# only a comment\n"), None);
        assert_eq!(at("x = 1"), None);
        assert_eq!(at("x += 1"), None);
        assert_eq!(at("x: int"), None);
        assert_eq!(at("a = b = 2"), None);
        assert_eq!(at("import os\nos.getpid()"), Some("os.getpid()"));
        assert_eq!(at("x = 1; x"), Some("x"));
        assert_eq!(at("x = 1; x;"), Some("x"));
        assert_eq!(at("1, 2  # a tuple\n\n"), Some("1, 2"));
        assert_eq!(at("f(\n  1,\n  2)\n# done"), Some("f(\n  1,\n  2)"));
        assert_eq!(at("await g()"), Some("await g()"));
        assert_eq!(at("def f():\n    return 1\n"), None);
        assert_eq!(at("if x:\n    y\n"), None);
        assert_eq!(at("'doc'"), Some("'doc'"));
        assert_eq!(at("x = (\n1)\n"), None);
    }

    #[test]
    fn unknown_when_tree_sitter_is_unsure() {
        assert_eq!(python_final_expression("x = ("), FinalExpression::Unknown);
        assert_eq!(python_final_expression("x\r\ny"), FinalExpression::Unknown);
        let big = "x = 1\n".repeat(MAX_HINTED_BYTES / 6 + 1);
        assert_eq!(python_final_expression(&big), FinalExpression::Unknown);
    }

    /// The analyzer's parse gives each cell the hint the cell's own parse would (code in a
    /// string it parses again, `exec("...")`, leaves the hint of the cell itself alone), and
    /// the request header carries it.
    #[test]
    fn the_analyzer_s_parse_gives_the_same_hint() {
        use crate::pipeline::analyzer::{Analyzer, Mode};
        let analyzer = Analyzer::builtin().expect("the builtin profile loads");
        let extra = [
            "exec('1 + 1')\nx = 2",
            "exec('x = 1')\nx",
            "import os\nos.system('true')\n3",
            "x = (",
        ];
        for code in CORPUS.iter().chain(extra.iter()) {
            let screened = analyzer.screen(crate::types::Language::Python, code, Mode::Warn);
            let own = python_final_expression(code);
            assert_eq!(screened.final_expression.as_ref(), Some(&own), "{code:?}");
            let frame = super::super::encode_request(
                crate::types::Language::Python,
                1,
                "ab",
                false,
                &Default::default(),
                code,
                screened.final_expression.as_ref(),
            );
            let header = String::from_utf8_lossy(&frame);
            let header = header.lines().next().unwrap_or_default();
            assert!(header.ends_with(&own.header_field()), "{header:?}");
        }
        // Off: nothing parsed, nothing to reuse.
        let off = analyzer.screen(crate::types::Language::Python, "1", Mode::Off);
        assert_eq!(off.final_expression, None);
    }

    #[test]
    fn header_fields() {
        assert_eq!(FinalExpression::Unknown.header_field(), "?");
        assert_eq!(FinalExpression::Absent.header_field(), "-");
        assert_eq!(FinalExpression::At(3..9).header_field(), "3:9");
    }

    /// The hint against CPython's own parser, on cells of every kind: wherever the host gives
    /// a hint, it names exactly the statement `ast` finds (or says there is none when `ast`
    /// finds none). Needs /usr/bin/python3.
    #[test]
    fn agrees_with_cpython() {
        let python = std::path::Path::new("/usr/bin/python3");
        if !python.exists() {
            eprintln!("skipped: agrees_with_cpython needs /usr/bin/python3 as the oracle");
            return;
        }
        let cells: Vec<String> = CORPUS.iter().map(|s| s.to_string()).collect();
        let oracle = r#"
import ast, json, sys
out = []
for code in json.load(sys.stdin):
    try:
        tree = ast.parse(code)
    except SyntaxError:
        out.append("syntax-error")
        continue
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        b = code.encode()
        lines = b.split(b"\n")
        s = tree.body[-1]
        start = sum(len(l) + 1 for l in lines[: s.lineno - 1]) + s.col_offset
        end = sum(len(l) + 1 for l in lines[: s.end_lineno - 1]) + s.end_col_offset
        out.append([start, end])
    else:
        out.append(None)
json.dump(out, sys.stdout)
"#;
        let mut child = std::process::Command::new(python)
            .args(["-I", "-c", oracle])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            stdin
                .write_all(serde_json::to_string(&cells).unwrap().as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let truth: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        let (mut hinted, mut valid) = (0, 0);
        for (code, truth) in cells.iter().zip(truth) {
            valid += usize::from(!truth.is_string());
            let hint = python_final_expression(code);
            match (&hint, &truth) {
                (FinalExpression::Unknown, _) => {}
                (_, serde_json::Value::String(_)) => {
                    // A syntax error: the driver reports CPython's error whatever the hint
                    // (a part that does not compile sends it back to `ast`).
                }
                (FinalExpression::Absent, serde_json::Value::Null) => hinted += 1,
                (FinalExpression::At(r), serde_json::Value::Array(a)) => {
                    let want = a[0].as_u64().unwrap() as usize..a[1].as_u64().unwrap() as usize;
                    assert_eq!(r, &want, "final expression of {code:?}");
                    hinted += 1;
                }
                _ => panic!("{code:?}: host hint {hint:?}, CPython {truth}"),
            }
        }
        // The fast path must be the usual one, not a rare one (the corpus is mostly corner
        // cases).
        assert!(hinted * 10 >= valid * 9, "{hinted} of {valid}");
    }

    const CORPUS: &[&str] = &[
        "pass",
        "",
        "\n\n",
        "# c",
        "1",
        "1 + 1",
        "x",
        "x = 1",
        "x = 1\nx",
        "x = 1; x",
        "x = 1; x;",
        "x;",
        "x  # trailing comment",
        "x\n# comment\n\n",
        "x += 1",
        "x: int = 3",
        "x: int",
        "a = b = 3",
        "a, b = 1, 2",
        "a, b",
        "a, b,",
        "(a, b)",
        "[1, 2, 3]",
        "{'a': 1}",
        "{1, 2}",
        "print('hi')",
        "print(1); print(2)",
        "import os",
        "import os\nos.getcwd()",
        "from os import path as p\np",
        "def f():\n    return 1\nf()",
        "def f():\n    return 1",
        "class A:\n    pass",
        "class A:\n    pass\nA()",
        "@dec\ndef f(): pass",
        "if True:\n    1\n",
        "if True:\n    1\nelse:\n    2",
        "for i in range(3):\n    i",
        "while False:\n    pass",
        "try:\n    1\nexcept Exception:\n    2",
        "with open('f') as f:\n    f.read()",
        "lambda x: x",
        "(lambda x: x)(1)",
        "[i for i in range(3)]",
        "(i for i in range(3))",
        "x if y else z",
        "not x",
        "x and y or z",
        "a < b < c",
        "a[1:2]",
        "a.b.c",
        "a(*b, **c)",
        "'a' 'b'",
        "f'{x}'",
        "f'{x!r:>10}'",
        "b'bytes'",
        "r'raw\\n'",
        "'''triple\nquoted'''",
        "\"\"\"doc\"\"\"\nx = 1",
        "...",
        "None",
        "True",
        "-1",
        "~x",
        "x ** 2",
        "x @ y",
        "(x := 5)",
        "y = (x := 5)\ny",
        "await asyncio.sleep(0)",
        "import asyncio\nawait asyncio.sleep(0)",
        "async def f():\n    return 1\nawait f()",
        "del x",
        "assert x",
        "raise ValueError('x')",
        "global x",
        "nonlocal x",
        "return 1",
        "yield 1",
        "x = yield",
        "break",
        "continue",
        "match x:\n    case 1:\n        pass",
        "match = 3\nmatch",
        "match(1)",
        "case = 2\ncase",
        "type = 5\ntype",
        "type(1)",
        "print >> f",
        "print x",
        "exec 'x'",
        "x = (\n    1,\n    2,\n)\nx",
        "f(\n    1,\n)",
        "x = 1 \\\n    + 2\nx",
        "x \\\n + 1",
        "é = 1\né",
        "s = 'é😀'\ns",
        "s = 'é😀'; s",
        "  x",
        "x\n  y",
        "if x:\npass",
        "x = (",
        "x)",
        "1 +",
        "def",
        "'unterminated",
        "x = 1\n\n\n\nx + 1\n\n\n",
        "\tx = 1\n",
        "x = 1\n\tx",
        "x = [\n    1,  # one\n    2,  # two\n]\nlen(x)",
        "from __future__ import annotations\nx: 'int' = 1\nx",
        "async with a:\n    pass",
        "async for i in a:\n    pass",
        "x[0] = 1",
        "x.y = 2",
        "*a, b = [1, 2, 3]",
        "*a, b",
        "print(*a)",
        "{**a}",
        "[*a]",
        "x = 1; y = 2; x + y",
        "x = 1;y = 2;x+y;",
        "if x: y",
        "if x: y\nz",
        "with a: pass",
        "try: pass\nfinally: pass",
        "@property\ndef f(self): pass",
        "0x1f",
        "1_000_000",
        "1e10",
        "1j",
        "__import__('os').getpid()",
        "exec('1')",
        "eval('1')",
        "x = 1 # c\n# d\nx # e",
        "x = '''\n'''\nx",
        "    ",
        "\n# a\n# b",
    ];
}
