//! Scope tracking shared by the Python and JavaScript analyzers: a flow-insensitive symbol
//! table over one piece of code (each name's bindings: an import's qualified name, an
//! expression, or a property path of an expression) and what every expression, and so every
//! name, may refer to.
//!
//! Resolution is bottom-up: a post-order pass computes each expression from its children
//! (already computed) and the current values of the names it uses; a name's value grows as
//! its bindings' values are computed. Passes repeat until nothing changes (at most
//! `MAX_PASSES`), so nothing recurses over the tree and every pass is linear. Only names that
//! can still lead to a rule match are kept ([`Relevance`]).
//!
//! A name always also resolves to itself (the table is flow-insensitive, so a binding may not
//! be in effect where the name is used), to `M.name` after Python's `from M import *`, and to
//! what it meant in the code a string was found in (`exec("...")`, `eval('...')`).
//!
//! The grammars differ, so each language collects its bindings itself ([`Scope::bind`]) and
//! implements [`Resolve`] for its `Scope`: how identifiers and qualified names are spelled
//! and how one expression is computed from its children.

use super::syntax::{append, text, Postorder, Relevance, CONST_BUDGET, MAX_NAME_HOPS, MAX_PASSES};
use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;
use tree_sitter::Node;

/// Names bound in an enclosing piece of code (for code re-parsed from a string of it).
pub(crate) type Inherited = HashMap<String, Vec<String>>;

/// What a name is bound to.
#[derive(Debug, Clone)]
pub(crate) enum Binding<'a> {
    /// An import: a qualified name (`import os as o`, `child_process.exec`).
    Qualified(String),
    /// `x = <expr>`.
    Expr(Node<'a>),
    /// `const {a: {b: x}} = <expr>` (JavaScript): a property path of an expression.
    Member(Node<'a>, Vec<String>),
}

/// What a language tells the resolution, implemented for its [`Scope`].
pub(crate) trait Resolve<'a> {
    /// Kinds whose value (what they refer to, or their constant string) is computed.
    const VALUE_KINDS: &'static [&'static str];

    /// The canonical spelling of an identifier as written.
    fn ident(name: &str) -> String;

    /// The canonical spelling of a qualified name.
    fn normalize(name: &str) -> String;

    /// An expression's value from its children's and the names' current values.
    fn eval(&self, node: Node<'a>) -> Vec<String>;

    /// A constant string from the children's constants (`None`: not constant).
    fn eval_const(&self, node: Node<'a>) -> Option<Rc<str>>;
}

/// The symbol table of one piece of code and what every expression resolves to. `L` is the
/// language, with any state of its own.
pub(crate) struct Scope<'a, L> {
    pub(crate) code: &'a str,
    pub(crate) bindings: HashMap<String, Vec<Binding<'a>>>,
    /// Modules of `from M import *` (Python).
    pub(crate) stars: Vec<String>,
    /// The language's own state.
    pub(crate) lang: L,
    inherited: &'a Inherited,
    /// Expressions bound to names: node id → (name, property path).
    binding_roots: HashMap<usize, Vec<(String, Vec<String>)>>,
    /// What each name may refer to.
    names: HashMap<String, Vec<String>>,
    /// What each expression may refer to (node id → qualified names).
    values: HashMap<usize, Vec<String>>,
    /// Constant string expressions (node id → value).
    consts: HashMap<usize, Rc<str>>,
    const_budget: Cell<usize>,
    relevance: Relevance,
}

impl<'a, L> Scope<'a, L>
where
    Self: Resolve<'a>,
{
    /// An empty table; the language then [`bind`](Self::bind)s and [`resolve`](Self::resolve)s.
    pub(crate) fn new(
        code: &'a str,
        inherited: &'a Inherited,
        relevance: Relevance,
        lang: L,
    ) -> Self {
        Scope {
            code,
            bindings: HashMap::new(),
            stars: Vec::new(),
            lang,
            inherited,
            binding_roots: HashMap::new(),
            names: HashMap::new(),
            values: HashMap::new(),
            consts: HashMap::new(),
            const_budget: Cell::new(CONST_BUDGET),
            relevance,
        }
    }

    /// Binds the identifier `name` (a node) to `binding`.
    pub(crate) fn bind(&mut self, name: Node<'a>, binding: Binding<'a>) {
        let name = Self::ident(text(name, self.code));
        self.bindings.entry(name).or_default().push(binding);
    }

    /// Computes what every expression of `order` refers to, once the bindings are collected.
    pub(crate) fn resolve(&mut self, order: &Postorder<'a>) {
        for (name, bindings) in &self.bindings {
            for binding in bindings {
                let (node, path) = match binding {
                    Binding::Expr(e) => (e, Vec::new()),
                    Binding::Member(e, path) => (e, path.clone()),
                    Binding::Qualified(_) => continue,
                };
                let targets = self.binding_roots.entry(node.id()).or_default();
                targets.push((name.clone(), path));
            }
        }
        let order: Vec<Node<'a>> = order
            .nodes
            .iter()
            .copied()
            .filter(|n| Self::VALUE_KINDS.contains(&n.kind()))
            .collect();
        for _ in 0..MAX_PASSES {
            if !self.pass(&order) {
                break;
            }
        }
    }

    /// One bottom-up pass; true if anything changed.
    fn pass(&mut self, order: &[Node<'a>]) -> bool {
        let mut changed = false;
        for node in order {
            let id = node.id();
            if !self.consts.contains_key(&id) {
                if let Some(c) = self.eval_const(*node) {
                    self.consts.insert(id, c);
                    changed = true;
                }
            }
            let value = self.eval(*node);
            if value.is_empty() || self.values.get(&id) == Some(&value) {
                continue;
            }
            changed = true;
            if let Some(targets) = self.binding_roots.get(&id) {
                for (name, path) in targets.clone() {
                    let mut merged = self.name_value(&name);
                    if path.is_empty() {
                        merged.extend(value.iter().cloned());
                    } else {
                        merged.extend(append(value.clone(), &path.join(".")));
                    }
                    let merged = self.canonical(merged);
                    self.names.insert(name, merged);
                }
            }
            self.values.insert(id, value);
        }
        changed
    }

    /// What the bound names resolve to, for code re-parsed from a string of this code.
    pub(crate) fn export(&self) -> Inherited {
        let mut out = self.inherited.clone();
        for name in self.bindings.keys() {
            out.insert(name.clone(), self.name_value(name));
        }
        out
    }

    /// What a name may refer to: itself, `M.name` after `from M import *`, its imports, what
    /// it is bound to here or in the enclosing code.
    pub(crate) fn name_value(&self, name: &str) -> Vec<String> {
        if let Some(v) = self.names.get(name) {
            return v.clone();
        }
        let mut out = vec![name.to_string()];
        out.extend(self.stars.iter().map(|m| format!("{m}.{name}")));
        out.extend(self.inherited.get(name).into_iter().flatten().cloned());
        for binding in self.bindings.get(name).into_iter().flatten() {
            if let Binding::Qualified(q) = binding {
                out.push(q.clone());
            }
        }
        self.canonical(out)
    }

    /// Normalised, relevant only, sorted, deduplicated and capped.
    pub(crate) fn canonical(&self, names: Vec<String>) -> Vec<String> {
        self.relevance
            .tidy(names.into_iter().map(|q| Self::normalize(&q)).collect())
    }

    /// The qualified names an expression may refer to (empty: unknown).
    pub(crate) fn value(&self, node: Node<'a>) -> Vec<String> {
        self.values.get(&node.id()).cloned().unwrap_or_default()
    }

    /// The value of a node's child `field` (empty: none, or unknown).
    pub(crate) fn child_value(&self, node: Node<'a>, field: &str) -> Vec<String> {
        node.child_by_field_name(field)
            .map(|n| self.value(n))
            .unwrap_or_default()
    }

    /// The value of a constant string expression, or of a name bound once to a constant.
    pub(crate) fn const_str(&self, node: Node<'a>) -> Option<Rc<str>> {
        if node.kind() == "identifier" {
            return self.name_const(&Self::ident(text(node, self.code)));
        }
        self.consts.get(&node.id()).cloned()
    }

    /// The constant a name is bound to, when it is bound exactly once (through at most
    /// `MAX_NAME_HOPS` names bound to names).
    fn name_const(&self, name: &str) -> Option<Rc<str>> {
        let mut name = name.to_string();
        for _ in 0..MAX_NAME_HOPS {
            let Some([Binding::Expr(e)]) = self.bindings.get(&name).map(Vec::as_slice) else {
                return None;
            };
            if e.kind() != "identifier" {
                return self.consts.get(&e.id()).cloned();
            }
            name = Self::ident(text(*e, self.code));
        }
        None
    }

    /// Constant strings joined, within the bytes left for this parse (`None`: over budget).
    pub(crate) fn concat(&self, parts: &[Rc<str>]) -> Option<Rc<str>> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let left = self.const_budget.get();
        if len > left {
            return None;
        }
        self.const_budget.set(left - len);
        Some(Rc::from(parts.concat()))
    }

    /// `left + right` of two constant strings (the field names both grammars use).
    pub(crate) fn const_sum(&self, node: Node<'a>) -> Option<Rc<str>> {
        if node.child_by_field_name("operator").map(|o| o.kind()) != Some("+") {
            return None;
        }
        let left = self.const_str(node.child_by_field_name("left")?)?;
        let right = self.const_str(node.child_by_field_name("right")?)?;
        self.concat(&[left, right])
    }
}
