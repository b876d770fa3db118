//! Python: calls matched on the resolved qualified name of their callee.
//!
//! A flow-insensitive symbol table over the whole file (one scope: bindings inside functions
//! count everywhere) maps names to what they may refer to:
//! - `import os`, `import os.path` (binds `os`), `import os as o`, `import os.path as p`;
//! - `from subprocess import run [as r]`, `from os import *` (a bare name `system` may then
//!   be `os.system`);
//! - assignments `x = os`, `s = os.system`, `a, b = os, sys`, `(x := os)`, `a = b = os`.
//!
//! Expressions resolve through attributes, `getattr(x, 'name')`, `__import__('os')`,
//! `importlib.import_module('os')`, `x['name']` (for `sys.modules['os']`, `os.__dict__[...]`,
//! `vars(os)[...]`), `functools.partial(f, ...)`, conditional and boolean expressions, with
//! constant strings folded (`'sys' + 'tem'`, implicit concatenation, a name bound once to a
//! constant). Names are normalised: `builtins.`/`__builtins__.` dropped, `.__dict__`
//! dropped, `sys.modules.X` → `X`, `posix`/`nt` → `os`, `.__call__` dropped. Identifiers are
//! compared after a partial NFKC folding (fullwidth and mathematical letters, `ſ`).
//!
//! A name always also resolves to itself (and, after `from M import *`, to `M.name`): the
//! table is flow-insensitive, so a binding may not be in effect where the name is used
//! (`if False: exec = print`, `del exec`, a local of another function). Rebinding a name
//! therefore never hides what it means unbound; `exec = print; exec(input())` is a false
//! positive this accepts.
//!
//! Resolution is bottom-up and iterative (see `scope.rs`, shared with JavaScript), and only
//! names that can still lead to a rule match are kept ([`Relevance`]), so the cost is linear
//! in the code and nothing recurses over the tree.

use super::glob::any_glob;
use super::rules::{ArgSpec, Matcher, PythonMatcher};
use super::scope::{self, Binding, Inherited, Resolve};
use super::syntax::{
    self, append, hex_char, named_children, text, Ctx, Lines, Postorder, Relevance, MAX_NAME_HOPS,
    MAX_NESTING,
};
use crate::pipeline::wrapper::final_expression;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use tree_sitter::Node;

/// Names that run a string as Python code: a constant first argument is analyzed too.
const EVAL_LIKE: &[&str] = &["exec", "eval", "compile"];

/// Names whose attributes or calls the resolver interprets (besides the rules' names).
const SPECIAL_NAMES: &[&str] = &[
    "builtins",
    "__builtins__",
    "__builtin__",
    "sys",
    "posix",
    "nt",
    "importlib",
    "functools",
    "getattr",
    "vars",
    "__import__",
    "exec",
    "eval",
    "compile",
];

/// The names worth tracking for these rules.
fn relevance(ctx: &Ctx) -> Relevance {
    let patterns = ctx.rules.iter().flat_map(|r| match &r.matcher {
        Matcher::Python(m) => m
            .calls
            .iter()
            .chain(&m.inner_calls)
            .map(|g| g.0.as_str())
            .collect(),
        _ => Vec::new(),
    });
    Relevance::new(patterns, SPECIAL_NAMES, &[])
}

pub(crate) fn analyze(ctx: &mut Ctx, code: &str) {
    analyze_nested(ctx, code, Lines::Offset(0), &Inherited::new(), 0);
}

fn analyze_nested(ctx: &mut Ctx, code: &str, lines: Lines, inherited: &Inherited, nesting: usize) {
    let Some(tree) = syntax::parse(&tree_sitter_python::LANGUAGE.into(), code) else {
        return;
    };
    if nesting == 0 {
        // The request header's hint, from this parse rather than one more.
        ctx.final_expression = Some(final_expression::from_python_tree(&tree, code));
    }
    let root = tree.root_node();
    let order = Postorder::new(root);
    let scope = Scope::build(&order, code, inherited, relevance(ctx));
    let marks = inner_call_marks(ctx, &scope, &order);
    let mut embedded: Vec<(String, Lines)> = Vec::new();
    for node in &order.nodes {
        if node.kind() == "call" {
            check_call(ctx, &scope, &marks, *node, lines, &mut embedded);
        }
    }
    // After the calls, so that a line's message names the call (`subprocess.run`) rather
    // than a value passed to it (`subprocess.PIPE`).
    for node in &order.nodes {
        check_values(ctx, &scope, *node, lines);
    }
    if nesting >= MAX_NESTING || embedded.is_empty() {
        return;
    }
    let exported = scope.export();
    ctx.analyze_embedded(embedded, |sub, source| {
        analyze_nested(sub, source, Lines::Offset(0), &exported, nesting + 1);
    });
}

fn check_call<'a>(
    ctx: &mut Ctx,
    scope: &Scope<'a>,
    marks: &HashMap<usize, HashMap<usize, ()>>,
    call: Node<'a>,
    lines: Lines,
    embedded: &mut Vec<(String, Lines)>,
) {
    let Some(function) = call.child_by_field_name("function") else {
        return;
    };
    let callees = scope.value(function);
    let args = Args::of(call, scope.code);
    let line = lines.of(call);
    let rules = ctx.rules;
    for (index, rule) in rules.iter().enumerate() {
        let Matcher::Python(m) = &rule.matcher else {
            continue;
        };
        if !m.methods.is_empty() {
            if function.kind() == "attribute" {
                if let Some(attr) = function.child_by_field_name("attribute") {
                    let name = py_ident(text(attr, scope.code));
                    if m.methods.contains(&name) {
                        ctx.report(index, line, &name);
                    }
                }
            }
            continue;
        }
        if let Some(name) = callees.iter().find(|c| any_glob(&m.calls, c)) {
            if call_matches(scope, m, marks.get(&index), &args, call) {
                ctx.report(index, line, name);
            }
        }
    }
    if callees.iter().any(|c| EVAL_LIKE.contains(&c.as_str())) {
        if let Some(arg) = args.positional(0) {
            if let Some(source) = scope.const_str(arg).map(|s| s.to_string()) {
                let at = if arg.kind() == "string" {
                    lines.nested(arg.start_position().row)
                } else {
                    Lines::Fixed(line)
                };
                embedded.push((source, at));
            }
        }
    }
}

/// The expressions a node holds in value positions: arguments, collection elements, dict
/// values, assigned, returned and lambda values.
fn value_children(node: Node) -> Vec<Node> {
    match node.kind() {
        "argument_list" | "list" | "tuple" | "set" | "expression_list" | "return_statement" => {
            named_children(node)
        }
        "keyword_argument" | "pair" => node.child_by_field_name("value").into_iter().collect(),
        "assignment" => node.child_by_field_name("right").into_iter().collect(),
        "lambda" => node.child_by_field_name("body").into_iter().collect(),
        _ => Vec::new(),
    }
}

/// A matching function referenced as a value counts as called: `map(os.system, cmds)`,
/// `Thread(target=os.system)`, `f = os.system`, `[os.system]`, `{'f': os.system}`. Only for
/// `calls` rules without argument constraints (they need the call's arguments).
fn check_values<'a>(ctx: &mut Ctx, scope: &Scope<'a>, node: Node<'a>, lines: Lines) {
    let rules = ctx.rules;
    for value in value_children(node) {
        if !matches!(
            value.kind(),
            "identifier" | "attribute" | "subscript" | "call"
        ) {
            continue;
        }
        let names = scope.value(value);
        for (index, rule) in rules.iter().enumerate() {
            let Matcher::Python(m) = &rule.matcher else {
                continue;
            };
            if m.calls.is_empty() || !m.arg.is_empty() || !m.inner_calls.is_empty() {
                continue;
            }
            if let Some(name) = names.iter().find(|c| any_glob(&m.calls, c)) {
                ctx.report(index, lines.of(value), name);
            }
        }
    }
}

fn call_matches<'a>(
    scope: &Scope<'a>,
    m: &PythonMatcher,
    marks: Option<&HashMap<usize, ()>>,
    args: &Args<'a>,
    call: Node<'a>,
) -> bool {
    if !m.arg.iter().all(|spec| arg_matches(scope, args, spec)) {
        return false;
    }
    if !m.inner_calls.is_empty() {
        let arguments = call.child_by_field_name("arguments");
        if !arguments.is_some_and(|a| marks.is_some_and(|m| m.contains_key(&a.id()))) {
            return false;
        }
    }
    true
}

fn arg_matches<'a>(scope: &Scope<'a>, args: &Args<'a>, spec: &ArgSpec) -> bool {
    let node = spec
        .keyword
        .as_deref()
        .and_then(|k| args.keyword(k))
        .or_else(|| args.positional(spec.position));
    node.and_then(|n| scope.const_str(n))
        .is_some_and(|v| spec.accepts(&v))
}

/// For each rule with `inner_calls` (by index): the nodes whose subtree contains a call to
/// one of them, directly or through a name bound to such a call (`x = input(); exec(x)`).
fn inner_call_marks<'a>(
    ctx: &Ctx,
    scope: &Scope<'a>,
    order: &Postorder<'a>,
) -> HashMap<usize, HashMap<usize, ()>> {
    let mut out = HashMap::new();
    for (index, rule) in ctx.rules.iter().enumerate() {
        let Matcher::Python(m) = &rule.matcher else {
            continue;
        };
        if m.inner_calls.is_empty() {
            continue;
        }
        let is_inner = |call: Node<'a>| {
            call.child_by_field_name("function")
                .is_some_and(|f| scope.value(f).iter().any(|c| any_glob(&m.inner_calls, c)))
        };
        let bound_to_inner: HashSet<&str> = scope
            .bindings
            .iter()
            .filter(|(_, bindings)| {
                bindings
                    .iter()
                    .any(|b| matches!(b, Binding::Expr(e) if e.kind() == "call" && is_inner(*e)))
            })
            .map(|(name, _)| name.as_str())
            .collect();
        let marks = order.subtree_marks(|node| {
            let own = match node.kind() {
                "call" => is_inner(node),
                "identifier" => bound_to_inner.contains(py_ident(text(node, scope.code)).as_str()),
                _ => false,
            };
            own.then_some(())
        });
        out.insert(index, marks);
    }
    out
}

/// The arguments of a call.
struct Args<'a> {
    positional: Vec<Node<'a>>,
    keywords: Vec<(String, Node<'a>)>,
    /// Index of the first `*args` among the positional ones (later positions are unknown).
    splat: Option<usize>,
}

impl<'a> Args<'a> {
    fn of(call: Node<'a>, code: &str) -> Args<'a> {
        let mut args = Args {
            positional: Vec::new(),
            keywords: Vec::new(),
            splat: None,
        };
        let Some(list) = call.child_by_field_name("arguments") else {
            return args;
        };
        if list.kind() != "argument_list" {
            return args;
        }
        for child in named_children(list) {
            match child.kind() {
                "keyword_argument" => {
                    if let (Some(name), Some(value)) = (
                        child.child_by_field_name("name"),
                        child.child_by_field_name("value"),
                    ) {
                        args.keywords.push((py_ident(text(name, code)), value));
                    }
                }
                "list_splat" => {
                    args.splat.get_or_insert(args.positional.len());
                }
                "dictionary_splat" => {}
                _ => args.positional.push(child),
            }
        }
        args
    }

    fn positional(&self, index: usize) -> Option<Node<'a>> {
        if self.splat.is_some_and(|s| s <= index) {
            return None;
        }
        self.positional.get(index).copied()
    }

    fn keyword(&self, name: &str) -> Option<Node<'a>> {
        self.keywords
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
    }
}

/// Kinds whose value (what they refer to, or their constant string) is computed.
const VALUE_KINDS: &[&str] = &[
    "identifier",
    "attribute",
    "subscript",
    "call",
    "parenthesized_expression",
    "conditional_expression",
    "boolean_operator",
    "named_expression",
    "string",
    "concatenated_string",
    "binary_operator",
];

/// Python has no scope state of its own (one flow-insensitive scope for the whole file).
struct Python;

/// The symbol table and what every expression resolves to (see `scope.rs`).
type Scope<'a> = scope::Scope<'a, Python>;

impl<'a> Scope<'a> {
    fn build(
        order: &Postorder<'a>,
        code: &'a str,
        inherited: &'a Inherited,
        relevance: Relevance,
    ) -> Scope<'a> {
        let mut scope = Scope::new(code, inherited, relevance, Python);
        for node in &order.nodes {
            scope.collect(*node);
        }
        scope.resolve(order);
        scope
    }

    fn collect(&mut self, node: Node<'a>) {
        match node.kind() {
            "import_statement" => {
                for item in syntax::field_children(node, "name") {
                    match item.kind() {
                        "dotted_name" => {
                            if let Some(first) = named_children(item).first() {
                                let module = py_ident(text(*first, self.code));
                                self.bind(*first, Binding::Qualified(module));
                            }
                        }
                        "aliased_import" => {
                            if let (Some(name), Some(alias)) = (
                                item.child_by_field_name("name"),
                                item.child_by_field_name("alias"),
                            ) {
                                let module = dotted(name, self.code);
                                self.bind(alias, Binding::Qualified(module));
                            }
                        }
                        _ => {}
                    }
                }
            }
            "import_from_statement" => {
                let module = node
                    .child_by_field_name("module_name")
                    .filter(|m| m.kind() == "dotted_name")
                    .map(|m| dotted(m, self.code));
                for item in syntax::field_children(node, "name") {
                    let (name, target) = match item.kind() {
                        "dotted_name" => (Some(item), Some(item)),
                        "aliased_import" => (
                            item.child_by_field_name("name"),
                            item.child_by_field_name("alias"),
                        ),
                        _ => (None, None),
                    };
                    if let (Some(name), Some(target)) = (name, target) {
                        // A relative import (`from . import x`) binds nothing known.
                        if let Some(m) = &module {
                            let q = format!("{m}.{}", dotted(name, self.code));
                            self.bind(target, Binding::Qualified(q));
                        }
                    }
                }
                if let Some(m) = &module {
                    if named_children(node)
                        .iter()
                        .any(|c| c.kind() == "wildcard_import")
                    {
                        self.stars.push(m.clone());
                    }
                }
            }
            "assignment" => {
                // In `a = b = os` the inner assignment is visited too; bind its value here.
                let Some(left) = node.child_by_field_name("left") else {
                    return;
                };
                let mut right = node.child_by_field_name("right");
                for _ in 0..MAX_NAME_HOPS {
                    match right {
                        Some(r) if r.kind() == "assignment" => {
                            right = r.child_by_field_name("right")
                        }
                        _ => break,
                    }
                }
                if let Some(value) = right.filter(|r| r.kind() != "assignment") {
                    self.bind_target(left, Some(value), 0);
                }
            }
            "named_expression" => {
                if let (Some(name), Some(value)) = (
                    node.child_by_field_name("name"),
                    node.child_by_field_name("value"),
                ) {
                    self.bind(name, Binding::Expr(value));
                }
            }
            _ => {}
        }
    }

    /// Binds the names of an assignment target to (parts of) `value`.
    fn bind_target(&mut self, target: Node<'a>, value: Option<Node<'a>>, depth: usize) {
        if depth > MAX_NAME_HOPS {
            return;
        }
        match target.kind() {
            "identifier" => {
                if let Some(value) = value {
                    self.bind(target, Binding::Expr(value));
                }
            }
            "pattern_list" | "tuple_pattern" | "list_pattern" | "tuple" | "list" => {
                let targets = named_children(target);
                let values = value
                    .filter(|v| matches!(v.kind(), "expression_list" | "tuple" | "list"))
                    .map(named_children)
                    .filter(|v| v.len() == targets.len());
                for (i, t) in targets.iter().enumerate() {
                    let v = values.as_ref().and_then(|vs| vs.get(i).copied());
                    self.bind_target(*t, v, depth + 1);
                }
            }
            _ => {}
        }
    }

    fn eval_call(&self, call: Node<'a>) -> Vec<String> {
        let args = Args::of(call, self.code);
        let arg_str = |i: usize, kw: &str| {
            args.keyword(kw)
                .or_else(|| args.positional(i))
                .and_then(|a| self.const_str(a))
        };
        let mut out = Vec::new();
        for callee in self.child_value(call, "function") {
            match callee.as_str() {
                "getattr" => {
                    if let (Some(object), Some(name)) = (args.positional(0), args.positional(1)) {
                        if let Some(name) = self.const_str(name) {
                            out.extend(append(self.value(object), &name));
                        }
                    }
                }
                "__import__" => {
                    if let Some(module) = arg_str(0, "name") {
                        out.extend(module.split('.').next().map(str::to_string));
                    }
                }
                "importlib.import_module" => out.extend(arg_str(0, "name").map(|m| m.to_string())),
                "vars" | "functools.partial" => {
                    if let Some(object) = args.positional(0) {
                        out.extend(self.value(object));
                    }
                }
                _ => {}
            }
        }
        out
    }
}

impl<'a> Resolve<'a> for Scope<'a> {
    const VALUE_KINDS: &'static [&'static str] = VALUE_KINDS;

    fn ident(name: &str) -> String {
        py_ident(name)
    }

    /// Canonical spelling of a qualified name (see the module doc).
    fn normalize(name: &str) -> String {
        let mut parts: Vec<&str> = name.split('.').filter(|p| *p != "__dict__").collect();
        loop {
            match parts.as_slice() {
                ["builtins" | "__builtins__" | "__builtin__", _, ..] => {
                    parts.remove(0);
                }
                ["sys", "modules", _, ..] => {
                    parts.drain(..2);
                }
                [.., _, "__call__"] => {
                    parts.pop();
                }
                _ => break,
            }
        }
        if let Some(first) = parts.first_mut() {
            if matches!(*first, "posix" | "nt") {
                *first = "os";
            }
        }
        let joined = parts.join(".");
        match joined.as_str() {
            "importlib.__import__" => "__import__".to_string(),
            _ => joined,
        }
    }

    /// An expression's value from its children's and the names' current values.
    fn eval(&self, node: Node<'a>) -> Vec<String> {
        let out = match node.kind() {
            "identifier" => return self.name_value(&py_ident(text(node, self.code))),
            "attribute" => match node.child_by_field_name("attribute") {
                Some(attr) => append(
                    self.child_value(node, "object"),
                    &py_ident(text(attr, self.code)),
                ),
                None => Vec::new(),
            },
            "subscript" => match node
                .child_by_field_name("subscript")
                .and_then(|k| self.const_str(k))
            {
                Some(key) => append(self.child_value(node, "value"), &key),
                None => Vec::new(),
            },
            "call" => self.eval_call(node),
            "parenthesized_expression" => named_children(node)
                .first()
                .map(|n| self.value(*n))
                .unwrap_or_default(),
            "conditional_expression" => {
                let parts = named_children(node);
                let mut out = parts.first().map(|n| self.value(*n)).unwrap_or_default();
                out.extend(parts.get(2).map(|n| self.value(*n)).unwrap_or_default());
                out
            }
            "boolean_operator" => {
                let mut out = self.child_value(node, "left");
                out.extend(self.child_value(node, "right"));
                out
            }
            "named_expression" => self.child_value(node, "value"),
            _ => Vec::new(),
        };
        self.canonical(out)
    }

    /// A constant string from the children's constants (`None`: not constant): literals (not
    /// f-strings with interpolations), implicit and `+` concatenation (a name bound once to a
    /// constant is [`const_str`](scope::Scope::const_str)'s).
    fn eval_const(&self, node: Node<'a>) -> Option<Rc<str>> {
        match node.kind() {
            "string" => string_value(node, self.code).map(Rc::from),
            "concatenated_string" => {
                let parts: Option<Vec<Rc<str>>> = named_children(node)
                    .into_iter()
                    .map(|p| self.const_str(p))
                    .collect();
                self.concat(&parts?)
            }
            "binary_operator" => self.const_sum(node),
            "parenthesized_expression" => self.const_str(*named_children(node).first()?),
            _ => None,
        }
    }
}

/// The dotted text of a `dotted_name` (identifiers normalised).
fn dotted(node: Node, code: &str) -> String {
    let parts: Vec<String> = named_children(node)
        .into_iter()
        .map(|p| py_ident(text(p, code)))
        .collect();
    if parts.is_empty() {
        py_ident(text(node, code))
    } else {
        parts.join(".")
    }
}

/// The value of a string literal; `None` for an f-string with interpolations.
fn string_value(node: Node, code: &str) -> Option<String> {
    let mut raw = false;
    let mut out = String::new();
    for child in syntax::named_children(node) {
        match child.kind() {
            "string_start" => {
                let prefix = text(child, code).trim_end_matches(['"', '\'']);
                raw = prefix.contains(['r', 'R']);
            }
            "string_content" => {
                let t = text(child, code);
                if raw {
                    out.push_str(t);
                } else {
                    out.push_str(&unescape(t));
                }
            }
            "interpolation" => return None,
            _ => {}
        }
    }
    Some(out)
}

/// Decodes Python escape sequences (`\n`, `\x41`, `\u0041`, `\101`, line continuations...).
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        match e {
            '\n' => {}
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'v' => out.push('\u{b}'),
            '\\' | '\'' | '"' => out.push(e),
            'x' => out.extend(take_hex(&mut chars, 2)),
            'u' => out.extend(take_hex(&mut chars, 4)),
            'U' => out.extend(take_hex(&mut chars, 8)),
            '0'..='7' => {
                let mut value = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.next_if(|c| ('0'..='7').contains(c)) {
                        Some(d) => value = value * 8 + d.to_digit(8).unwrap_or(0),
                        None => break,
                    }
                }
                out.extend(char::from_u32(value));
            }
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}

/// Up to `n` hex digits as a code point.
fn take_hex(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, n: usize) -> Option<char> {
    let digits: String = (0..n)
        .map_while(|_| chars.next_if(|c| c.is_ascii_hexdigit()))
        .collect();
    hex_char(&digits)
}

/// Python compares identifiers after NFKC normalisation (`ｏｓ` is `os`). Without a
/// normalisation table this covers the usual disguises: fullwidth forms, mathematical
/// alphanumerics and the long s.
pub(crate) fn py_ident(name: &str) -> String {
    if name.is_ascii() {
        return name.to_string();
    }
    name.chars()
        .map(|c| {
            let u = c as u32;
            let mapped = match u {
                0xFF01..=0xFF5E => char::from_u32(u - 0xFEE0),
                0x1D400..=0x1D6A3 => {
                    let i = (u - 0x1D400) % 52;
                    char::from_u32(if i < 26 {
                        'A' as u32 + i
                    } else {
                        'a' as u32 + i - 26
                    })
                }
                0x1D7CE..=0x1D7FF => char::from_u32('0' as u32 + (u - 0x1D7CE) % 10),
                0x017F => Some('s'),
                _ => None,
            };
            mapped.unwrap_or(c)
        })
        .collect()
}
