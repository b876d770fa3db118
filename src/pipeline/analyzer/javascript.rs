//! JavaScript: module loads and calls matched on resolved names.
//!
//! A module is loaded by `require('m')` (any string constant: quotes, backticks without
//! substitutions, a name bound to a constant, `'child_' + 'process'`), `import ... from 'm'`,
//! `export ... from 'm'`, `import('m')`, and by anything that resolves to `require`:
//! `const r = require`, `(0, require)`, `require.bind(null)`, `require.call(null, 'm')`,
//! `module.require`, `process.mainModule.require`, `require.main.require`,
//! `module.constructor._load`, `require('module')._load`, `createRequire(...)(...)`,
//! `__sandpit_driver__.import`. `node:` prefixes are dropped. Node's `-e` mode (how cells
//! run) also exposes the built-in modules as globals, so a use of the global `fs`,
//! `globalThis.fs` or `globalThis['child_process']` counts as loading it unless a
//! declaration of that name is in scope.
//!
//! Calls resolve through a flow-insensitive table over the whole file: `const p = process`,
//! `const {exit} = process`, `const {exit: e} = process`, `p = process` (assignment),
//! imports, `x.y`, `x['y']`, `Reflect.get(x, 'y')`, `f.call`/`f.apply`/`f.bind`, `a || b`,
//! `c ? a : b`, `(0, f)`, `await x`; `globalThis.`/`global.`/`window.`/`self.` are dropped.
//! As in Python, a name always also resolves to itself (the global), so rebinding it does
//! not hide it; identifiers may be spelled with `\u` escapes (`\u0072equire`).
//!
//! Resolution is bottom-up and iterative (see `scope.rs`, shared with Python), and
//! declarations are scoped by function with an explicit stack (blocks are not scopes here).

use super::glob::any_glob;
use super::rules::{JavascriptMatcher, Matcher};
use super::scope::{self, Binding, Inherited, Resolve};
use super::syntax::{
    self, append, hex_char, named_children, text, Ctx, Lines, Postorder, Relevance, MAX_NESTING,
};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use tree_sitter::Node;

/// Names whose string argument is JavaScript code, with the argument that holds it
/// (`None`: the last one, as for `Function('a', 'body')`).
const EVAL_LIKE: &[(&str, Option<usize>)] = &[
    ("eval", Some(0)),
    ("Function", None),
    ("vm.runInThisContext", Some(0)),
    ("vm.runInNewContext", Some(0)),
    ("vm.runInContext", Some(0)),
    ("vm.Script", Some(0)),
    ("vm.compileFunction", Some(0)),
    ("worker_threads.Worker", Some(0)),
];

/// Objects whose properties are the globals.
const GLOBAL_OBJECTS: &[&str] = &["globalThis", "global", "window", "self"];

/// Kinds that start a new function scope for declarations.
const FUNCTION_KINDS: &[&str] = &[
    "function_declaration",
    "function_expression",
    "function",
    "generator_function_declaration",
    "generator_function",
    "arrow_function",
    "method_definition",
];

/// Names whose attributes or calls the resolver interprets (besides the rules' names).
const SPECIAL_NAMES: &[&str] = &[
    "require",
    "module",
    "process",
    "globalThis",
    "global",
    "window",
    "self",
    "Reflect",
    "__sandpit_driver__",
    "eval",
    "Function",
    "vm",
    "worker_threads",
];

/// The names worth tracking for these rules.
fn relevance(ctx: &Ctx) -> Relevance {
    let patterns = ctx.rules.iter().flat_map(|r| match &r.matcher {
        Matcher::Javascript(m) => m.calls.iter().map(|g| g.0.as_str()).collect(),
        _ => Vec::new(),
    });
    Relevance::new(patterns, SPECIAL_NAMES, &[".call", ".apply", ".bind"])
}

pub(crate) fn analyze(ctx: &mut Ctx, code: &str) {
    analyze_nested(ctx, code, Lines::Offset(0), &Inherited::new(), 0);
}

fn analyze_nested(ctx: &mut Ctx, code: &str, lines: Lines, inherited: &Inherited, nesting: usize) {
    let Some(tree) = syntax::parse(&tree_sitter_javascript::LANGUAGE.into(), code) else {
        return;
    };
    let root = tree.root_node();
    let rules = ctx.rules;
    let module_names: HashSet<&str> = rules
        .iter()
        .filter_map(|r| match &r.matcher {
            Matcher::Javascript(m) => Some(m.modules.iter().map(String::as_str)),
            _ => None,
        })
        .flatten()
        .collect();
    let order = Postorder::new(root);
    let scope = Scope::build(root, &order, code, inherited, &module_names, relevance(ctx));
    // Built-in modules used as globals (`fs.readFileSync` in `node -e`).
    for (node, name, at) in &scope.lang.global_uses {
        if !scope.declared_in_scope(name, *at) {
            report_module(ctx, name, lines.of(*node));
        }
    }
    let mut embedded: Vec<(String, Lines)> = Vec::new();
    for node in order.nodes.iter().copied() {
        match node.kind() {
            "import_statement" | "export_statement" => {
                if let Some(source) = node
                    .child_by_field_name("source")
                    .and_then(|s| scope.const_str(s).map(|s| s.to_string()))
                {
                    report_module(ctx, &module_name(&source), lines.of(node));
                }
            }
            "call_expression" | "new_expression" => {
                check_call(ctx, &scope, node, lines, &mut embedded)
            }
            "member_expression" | "subscript_expression" => {
                if let Some(name) = scope.global_property(node, &module_names) {
                    report_module(ctx, &name, lines.of(node));
                }
            }
            _ => {}
        }
    }
    // After the calls, so that a line's message names the call rather than a value.
    for node in order.nodes.iter().copied() {
        check_values(ctx, &scope, node, lines);
    }
    if nesting >= MAX_NESTING || embedded.is_empty() {
        return;
    }
    let exported = scope.export();
    ctx.analyze_embedded(embedded, |sub, source| {
        analyze_nested(sub, source, Lines::Offset(0), &exported, nesting + 1);
    });
}

/// The expressions a node holds in value positions: arguments, array elements, property
/// values, initialisers, assigned, returned and arrow-function values.
fn value_children(node: Node) -> Vec<Node> {
    match node.kind() {
        "arguments" | "array" | "return_statement" => named_children(node),
        "pair" | "variable_declarator" => node.child_by_field_name("value").into_iter().collect(),
        "assignment_expression" => node.child_by_field_name("right").into_iter().collect(),
        "arrow_function" => node.child_by_field_name("body").into_iter().collect(),
        _ => Vec::new(),
    }
}

/// A matching function referenced as a value counts as called: `setTimeout(process.exit)`,
/// `const e = process.exit`, `[process.exit]`, `{ f: process.exit }`.
fn check_values<'a>(ctx: &mut Ctx, scope: &Scope<'a>, node: Node<'a>, lines: Lines) {
    let rules = ctx.rules;
    for value in value_children(node) {
        if !matches!(
            value.kind(),
            "identifier" | "member_expression" | "subscript_expression"
        ) {
            continue;
        }
        let names = scope.value(value);
        for (index, rule) in rules.iter().enumerate() {
            if let Matcher::Javascript(m) = &rule.matcher {
                if let Some(name) = names.iter().find(|n| any_glob(&m.calls, n)) {
                    ctx.report(index, lines.of(value), name);
                }
            }
        }
    }
}

fn report_module(ctx: &mut Ctx, module: &str, line: usize) {
    let rules = ctx.rules;
    for (index, rule) in rules.iter().enumerate() {
        if let Matcher::Javascript(JavascriptMatcher { modules, .. }) = &rule.matcher {
            if modules.iter().any(|m| m == module) {
                ctx.report(index, line, module);
            }
        }
    }
}

fn check_call<'a>(
    ctx: &mut Ctx,
    scope: &Scope<'a>,
    call: Node<'a>,
    lines: Lines,
    embedded: &mut Vec<(String, Lines)>,
) {
    let line = lines.of(call);
    for module in scope.module_load(call) {
        report_module(ctx, &module, line);
    }
    let callee = call
        .child_by_field_name("function")
        .or_else(|| call.child_by_field_name("constructor"));
    let Some(callee) = callee else { return };
    let mut names = scope.value(callee);
    // `f.call(...)` and `f.apply(...)` call `f`.
    let direct: Vec<String> = names
        .iter()
        .filter_map(|n| {
            n.strip_suffix(".call")
                .or_else(|| n.strip_suffix(".apply"))
                .map(str::to_string)
        })
        .collect();
    names.extend(direct);
    let args = arguments(call);
    let rules = ctx.rules;
    for (index, rule) in rules.iter().enumerate() {
        let Matcher::Javascript(m) = &rule.matcher else {
            continue;
        };
        if m.calls.is_empty() {
            continue;
        }
        if let Some(name) = names.iter().find(|n| any_glob(&m.calls, n)) {
            ctx.report(index, line, name);
        }
    }
    for (name, position) in EVAL_LIKE {
        if !names.iter().any(|n| n == name) {
            continue;
        }
        let arg = match position {
            Some(i) => args.get(*i),
            None => args.last(),
        };
        if let Some(arg) = arg {
            if let Some(source) = scope.const_str(*arg).map(|s| s.to_string()) {
                let at = if matches!(arg.kind(), "string" | "template_string") {
                    lines.nested(arg.start_position().row)
                } else {
                    Lines::Fixed(line)
                };
                embedded.push((source, at));
            }
        }
        break;
    }
}

/// The argument expressions of a call or `new` (none after a spread, whose positions are
/// unknown).
fn arguments(call: Node) -> Vec<Node> {
    let Some(list) = call.child_by_field_name("arguments") else {
        return Vec::new();
    };
    if list.kind() != "arguments" {
        return Vec::new(); // a tagged template
    }
    named_children(list)
        .into_iter()
        .take_while(|a| a.kind() != "spread_element")
        .collect()
}

/// `node:fs` → `fs`.
fn module_name(source: &str) -> String {
    source.strip_prefix("node:").unwrap_or(source).to_string()
}

/// JavaScript's own scope state: function scopes and the names declared in each, for the
/// built-in modules used as globals.
struct Javascript<'a> {
    /// Function scopes: the enclosing scope of each (index 0 is the program).
    scope_parents: Vec<usize>,
    /// Declared names by scope index.
    declared: HashMap<usize, HashSet<String>>,
    /// Identifiers named like a built-in module, with their name and scope index.
    global_uses: Vec<(Node<'a>, String, usize)>,
}

/// The symbol table and what every expression resolves to (see `scope.rs`).
type Scope<'a> = scope::Scope<'a, Javascript<'a>>;

/// Kinds whose value (what they refer to, or their constant string) is computed.
const VALUE_KINDS: &[&str] = &[
    "identifier",
    "member_expression",
    "subscript_expression",
    "parenthesized_expression",
    "sequence_expression",
    "await_expression",
    "ternary_expression",
    "binary_expression",
    "assignment_expression",
    "call_expression",
    "string",
    "template_string",
];

impl<'a> Scope<'a> {
    /// Walks the tree with an explicit stack (no recursion, no `Node::parent`, which costs
    /// O(depth) per call), tracking the function scope of every node.
    fn build(
        root: Node<'a>,
        order: &Postorder<'a>,
        code: &'a str,
        inherited: &'a Inherited,
        module_names: &HashSet<&str>,
        relevance: Relevance,
    ) -> Scope<'a> {
        let lang = Javascript {
            scope_parents: vec![0],
            declared: HashMap::new(),
            global_uses: Vec::new(),
        };
        let mut scope = Scope::new(code, inherited, relevance, lang);
        let mut stack = vec![(root, 0usize)];
        let mut cursor = root.walk();
        while let Some((node, at)) = stack.pop() {
            let inner = if FUNCTION_KINDS.contains(&node.kind()) {
                scope.lang.scope_parents.push(at);
                scope.lang.scope_parents.len() - 1
            } else {
                at
            };
            scope.collect(node, at, inner);
            if matches!(node.kind(), "identifier" | "shorthand_property_identifier") {
                let name = js_ident(text(node, code));
                if module_names.contains(name.as_str()) {
                    scope.lang.global_uses.push((node, name, at));
                }
            }
            stack.extend(node.children(&mut cursor).map(|c| (c, inner)));
        }
        scope.resolve(order);
        scope
    }

    /// Records a declaration of `name` in scope `at` (a function, or the program; blocks are
    /// not scopes here).
    fn declare(&mut self, name: Node<'a>, at: usize) {
        let name = js_ident(text(name, self.code));
        self.lang.declared.entry(at).or_default().insert(name);
    }

    /// Bindings and declarations of one node; `at` is the scope the node is in, `inner` the
    /// scope of its children (differs for a function).
    fn collect(&mut self, node: Node<'a>, at: usize, inner: usize) {
        match node.kind() {
            "variable_declarator" => {
                if let Some(name) = node.child_by_field_name("name") {
                    let value = node.child_by_field_name("value");
                    self.bind_pattern(name, value, Vec::new(), at, 0);
                }
            }
            "assignment_expression" => {
                if let (Some(left), Some(right)) = (
                    node.child_by_field_name("left"),
                    node.child_by_field_name("right"),
                ) {
                    if matches!(left.kind(), "identifier" | "object_pattern") {
                        self.bind_assigned(left, right, Vec::new(), 0);
                    }
                }
            }
            "function_declaration" | "generator_function_declaration" | "class_declaration" => {
                if let Some(name) = node.child_by_field_name("name") {
                    self.declare(name, at);
                }
            }
            "formal_parameters" => {
                for param in named_children(node) {
                    self.declare_pattern(param, at, 0);
                }
            }
            "arrow_function" => {
                if let Some(param) = node.child_by_field_name("parameter") {
                    self.declare(param, inner);
                }
            }
            "catch_clause" => {
                if let Some(param) = node.child_by_field_name("parameter") {
                    self.declare_pattern(param, at, 0);
                }
            }
            "for_in_statement" => {
                if let Some(left) = node.child_by_field_name("left") {
                    self.declare_pattern(left, at, 0);
                }
            }
            "import_statement" => self.collect_import(node, at),
            _ => {}
        }
    }

    fn collect_import(&mut self, node: Node<'a>, at: usize) {
        let Some(source) = node
            .child_by_field_name("source")
            .and_then(|s| string_value(s, self.code))
        else {
            return;
        };
        let module = module_name(&source);
        let Some(clause) = named_children(node)
            .into_iter()
            .find(|c| c.kind() == "import_clause")
        else {
            return;
        };
        for part in named_children(clause) {
            match part.kind() {
                "identifier" => {
                    self.bind(part, Binding::Qualified(module.clone()));
                    self.declare(part, at);
                }
                "namespace_import" => {
                    for id in named_children(part) {
                        self.bind(id, Binding::Qualified(module.clone()));
                        self.declare(id, at);
                    }
                }
                "named_imports" => {
                    for spec in named_children(part) {
                        let name = spec.child_by_field_name("name");
                        let target = spec.child_by_field_name("alias").or(name);
                        if let (Some(name), Some(target)) = (name, target) {
                            let imported = string_value(name, self.code)
                                .unwrap_or_else(|| js_ident(text(name, self.code)));
                            let q = if imported == "default" {
                                module.clone()
                            } else {
                                format!("{module}.{imported}")
                            };
                            self.bind(target, Binding::Qualified(q));
                            self.declare(target, at);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// A declaration `pattern = value` (`value` absent for `let x;`).
    fn bind_pattern(
        &mut self,
        pattern: Node<'a>,
        value: Option<Node<'a>>,
        path: Vec<String>,
        at: usize,
        depth: usize,
    ) {
        if depth > 32 {
            return;
        }
        match pattern.kind() {
            "identifier" | "shorthand_property_identifier_pattern" => {
                self.declare(pattern, at);
                if let Some(value) = value {
                    let binding = if path.is_empty() {
                        Binding::Expr(value)
                    } else {
                        Binding::Member(value, path)
                    };
                    self.bind(pattern, binding);
                }
            }
            "object_pattern" => {
                for child in named_children(pattern) {
                    match child.kind() {
                        "shorthand_property_identifier_pattern" => {
                            let key = js_ident(text(child, self.code));
                            self.bind_pattern(child, value, extend(&path, key), at, depth + 1);
                        }
                        "object_assignment_pattern" => {
                            if let Some(left) = child.child_by_field_name("left") {
                                let key = js_ident(text(left, self.code));
                                self.bind_pattern(left, value, extend(&path, key), at, depth + 1);
                            }
                        }
                        "pair_pattern" => {
                            let key = child
                                .child_by_field_name("key")
                                .and_then(|k| self.property_key(k));
                            if let Some(target) = child.child_by_field_name("value") {
                                match key {
                                    Some(key) => self.bind_pattern(
                                        target,
                                        value,
                                        extend(&path, key),
                                        at,
                                        depth + 1,
                                    ),
                                    None => {
                                        self.bind_pattern(target, None, Vec::new(), at, depth + 1)
                                    }
                                }
                            }
                        }
                        _ => self.bind_pattern(child, None, Vec::new(), at, depth + 1),
                    }
                }
            }
            "array_pattern" | "rest_pattern" => {
                for child in named_children(pattern) {
                    self.bind_pattern(child, None, Vec::new(), at, depth + 1);
                }
            }
            "assignment_pattern" => {
                if let Some(left) = pattern.child_by_field_name("left") {
                    self.bind_pattern(left, None, Vec::new(), at, depth + 1);
                }
            }
            _ => {}
        }
    }

    /// An assignment `target = value` (declares nothing).
    fn bind_assigned(
        &mut self,
        target: Node<'a>,
        value: Node<'a>,
        path: Vec<String>,
        depth: usize,
    ) {
        if depth > 32 {
            return;
        }
        match target.kind() {
            "identifier" | "shorthand_property_identifier_pattern" => {
                let binding = if path.is_empty() {
                    Binding::Expr(value)
                } else {
                    Binding::Member(value, path)
                };
                self.bind(target, binding);
            }
            "object_pattern" => {
                for child in named_children(target) {
                    let (key, next) = match child.kind() {
                        "shorthand_property_identifier_pattern" => {
                            (Some(js_ident(text(child, self.code))), Some(child))
                        }
                        "object_assignment_pattern" => {
                            let left = child.child_by_field_name("left");
                            (left.map(|l| js_ident(text(l, self.code))), left)
                        }
                        "pair_pattern" => (
                            child
                                .child_by_field_name("key")
                                .and_then(|k| self.property_key(k)),
                            child.child_by_field_name("value"),
                        ),
                        _ => (None, None),
                    };
                    if let (Some(key), Some(next)) = (key, next) {
                        self.bind_assigned(next, value, extend(&path, key), depth + 1);
                    }
                }
            }
            _ => {}
        }
    }

    /// Declares every name a parameter/catch/loop pattern introduces.
    fn declare_pattern(&mut self, pattern: Node<'a>, at: usize, depth: usize) {
        if depth > 32 {
            return;
        }
        match pattern.kind() {
            "identifier" | "shorthand_property_identifier_pattern" => self.declare(pattern, at),
            "assignment_pattern" | "object_assignment_pattern" => {
                if let Some(left) = pattern.child_by_field_name("left") {
                    self.declare_pattern(left, at, depth + 1);
                }
            }
            "pair_pattern" => {
                if let Some(value) = pattern.child_by_field_name("value") {
                    self.declare_pattern(value, at, depth + 1);
                }
            }
            "object_pattern" | "array_pattern" | "rest_pattern" => {
                for child in named_children(pattern) {
                    self.declare_pattern(child, at, depth + 1);
                }
            }
            _ => {}
        }
    }

    fn property_key(&self, key: Node<'a>) -> Option<String> {
        match key.kind() {
            "property_identifier" => Some(js_ident(text(key, self.code))),
            "string" => string_value(key, self.code),
            "computed_property_name" => named_children(key)
                .first()
                .and_then(|k| string_value(*k, self.code)),
            _ => None,
        }
    }

    /// True if `name` is declared in scope `at`, an enclosing one, or the program.
    fn declared_in_scope(&self, name: &str, at: usize) -> bool {
        let has = |id: usize| {
            self.lang
                .declared
                .get(&id)
                .is_some_and(|names| names.contains(name))
        };
        let mut current = at;
        for _ in 0..512 {
            if has(current) {
                return true;
            }
            if current == 0 {
                return false;
            }
            current = self.lang.scope_parents.get(current).copied().unwrap_or(0);
        }
        has(0)
    }

    /// For `globalThis.fs` / `global['fs']`: the property, if it is one of `names` and the
    /// object is a global object.
    fn global_property(&self, node: Node<'a>, names: &HashSet<&str>) -> Option<String> {
        let property = match node.kind() {
            "member_expression" => node
                .child_by_field_name("property")
                .map(|p| js_ident(text(p, self.code))),
            _ => node
                .child_by_field_name("index")
                .and_then(|i| self.const_str(i))
                .map(|k| k.to_string()),
        }?;
        if !names.contains(property.as_str()) {
            return None;
        }
        let object = node.child_by_field_name("object")?;
        self.value(object)
            .iter()
            .any(|n| GLOBAL_OBJECTS.contains(&n.as_str()))
            .then_some(property)
    }

    /// What a call evaluates to, when it is a module load or returns a known function.
    fn eval_call(&self, call: Node<'a>) -> Vec<String> {
        let mut out = self.module_load(call);
        let args = arguments(call);
        for callee in self.child_value(call, "function") {
            if callee == "module.createRequire" {
                out.push("require".to_string());
            } else if let Some(base) = callee.strip_suffix(".bind") {
                out.push(base.to_string());
            } else if callee == "Reflect.get" {
                if let (Some(object), Some(key)) = (args.first(), args.get(1)) {
                    if let Some(key) = self.const_str(*key) {
                        out.extend(append(self.value(*object), &key));
                    }
                }
            }
        }
        out
    }

    /// The modules a call loads: `require('m')`, `import('m')`, `require.call(x, 'm')`.
    fn module_load(&self, call: Node<'a>) -> Vec<String> {
        if call.kind() != "call_expression" {
            return Vec::new();
        }
        let Some(function) = call.child_by_field_name("function") else {
            return Vec::new();
        };
        let args = arguments(call);
        let arg = |i: usize| {
            args.get(i)
                .and_then(|a| self.const_str(*a))
                .map(|s| module_name(&s))
        };
        if function.kind() == "import" {
            return arg(0).into_iter().collect();
        }
        let mut out = Vec::new();
        for callee in self.value(function) {
            match callee.as_str() {
                "require" => out.extend(arg(0)),
                "require.call" => out.extend(arg(1)),
                _ => {}
            }
        }
        out
    }
}

impl<'a> Resolve<'a> for Scope<'a> {
    const VALUE_KINDS: &'static [&'static str] = VALUE_KINDS;

    fn ident(name: &str) -> String {
        js_ident(name)
    }

    /// Canonical spelling of a qualified name (see the module doc).
    fn normalize(name: &str) -> String {
        const REQUIRE_ALIASES: &[&str] = &[
            "module.require",
            "process.mainModule.require",
            "require.main.require",
            "module.constructor._load",
            "module.Module._load",
            "module._load",
            "__sandpit_driver__.import",
        ];
        let mut s = name;
        'strip: loop {
            for g in GLOBAL_OBJECTS {
                if let Some(rest) = s.strip_prefix(g).and_then(|r| r.strip_prefix('.')) {
                    s = rest;
                    continue 'strip;
                }
            }
            break;
        }
        for alias in REQUIRE_ALIASES {
            if let Some(rest) = s.strip_prefix(alias) {
                if rest.is_empty() || rest.starts_with('.') {
                    return format!("require{rest}");
                }
            }
        }
        s.to_string()
    }

    /// An expression's value from its children's and the names' current values.
    fn eval(&self, node: Node<'a>) -> Vec<String> {
        let out = match node.kind() {
            "identifier" => return self.name_value(&js_ident(text(node, self.code))),
            "member_expression" => match node.child_by_field_name("property") {
                Some(p) if p.kind() == "property_identifier" => append(
                    self.child_value(node, "object"),
                    &js_ident(text(p, self.code)),
                ),
                _ => Vec::new(),
            },
            "subscript_expression" => match node
                .child_by_field_name("index")
                .and_then(|i| self.const_str(i))
            {
                Some(key) => append(self.child_value(node, "object"), &key),
                None => Vec::new(),
            },
            "parenthesized_expression" | "sequence_expression" => named_children(node)
                .last()
                .map(|n| self.value(*n))
                .unwrap_or_default(),
            "await_expression" => named_children(node)
                .first()
                .map(|n| self.value(*n))
                .unwrap_or_default(),
            "ternary_expression" => {
                let mut out = self.child_value(node, "consequence");
                out.extend(self.child_value(node, "alternative"));
                out
            }
            "binary_expression" => {
                let op = node.child_by_field_name("operator").map(|o| o.kind());
                if matches!(op, Some("||" | "&&" | "??")) {
                    let mut out = self.child_value(node, "left");
                    out.extend(self.child_value(node, "right"));
                    out
                } else {
                    Vec::new()
                }
            }
            "assignment_expression" => self.child_value(node, "right"),
            "call_expression" => self.eval_call(node),
            _ => Vec::new(),
        };
        self.canonical(out)
    }

    /// A constant string from the children's constants (`None`: not constant): quotes,
    /// backticks without substitutions, `+` concatenation (a name bound once to a constant is
    /// [`const_str`](scope::Scope::const_str)'s).
    fn eval_const(&self, node: Node<'a>) -> Option<Rc<str>> {
        match node.kind() {
            "string" | "template_string" => string_value(node, self.code).map(Rc::from),
            "binary_expression" => self.const_sum(node),
            "parenthesized_expression" => self.const_str(*named_children(node).last()?),
            _ => None,
        }
    }
}

fn extend(path: &[String], key: String) -> Vec<String> {
    let mut p = path.to_vec();
    p.push(key);
    p
}

/// The value of a string or template literal without substitutions.
fn string_value(node: Node, code: &str) -> Option<String> {
    let mut out = String::new();
    for child in named_children(node) {
        match child.kind() {
            "string_fragment" => out.push_str(text(child, code)),
            "escape_sequence" => out.push_str(&unescape(text(child, code))),
            "template_substitution" => return None,
            _ => {}
        }
    }
    Some(out)
}

/// Decodes one JavaScript escape sequence.
fn unescape(seq: &str) -> String {
    let body = seq.strip_prefix('\\').unwrap_or(seq);
    let mut chars = body.chars();
    let Some(first) = chars.next() else {
        return String::new();
    };
    let rest = chars.as_str();
    match first {
        'n' => "\n".into(),
        't' => "\t".into(),
        'r' => "\r".into(),
        'b' => "\u{8}".into(),
        'f' => "\u{c}".into(),
        'v' => "\u{b}".into(),
        '0' if rest.is_empty() => "\0".into(),
        '\n' | '\r' | '\u{2028}' | '\u{2029}' => String::new(),
        'x' => hex_char(rest).map(String::from).unwrap_or_default(),
        'u' => hex_char(rest.trim_start_matches('{').trim_end_matches('}'))
            .map(String::from)
            .unwrap_or_default(),
        other => other.to_string(),
    }
}

/// Identifiers may spell characters as `\u0072` or `\u{72}`.
fn js_ident(name: &str) -> String {
    if !name.contains('\\') {
        return name.to_string();
    }
    let mut out = String::new();
    let mut rest = name;
    while let Some(pos) = rest.find("\\u") {
        out.push_str(rest.get(..pos).unwrap_or_default());
        let after = rest.get(pos + 2..).unwrap_or_default();
        let (digits, next) = match after.strip_prefix('{') {
            Some(inner) => match inner.find('}') {
                Some(end) => (
                    inner.get(..end).unwrap_or_default(),
                    inner.get(end + 1..).unwrap_or_default(),
                ),
                None => (inner, ""),
            },
            None => (
                after.get(..4).unwrap_or(after),
                after.get(4..).unwrap_or_default(),
            ),
        };
        match hex_char(digits) {
            Some(c) => out.push(c),
            None => out.push_str(rest.get(pos..pos + 2).unwrap_or_default()),
        }
        rest = next;
    }
    out.push_str(rest);
    out
}
