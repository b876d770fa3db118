//! Shared syntax-tree plumbing: parsing, an iterative post-order list of the nodes (no
//! recursion, so deeply nested input cannot overflow the stack) with linear "something below
//! matches" queries, node text, line numbers, the names worth tracking and the finding
//! collector.

use super::rules::Rule;
use super::Finding;
use crate::pipeline::wrapper::final_expression::FinalExpression;
use std::collections::{HashMap, HashSet};
use tree_sitter::{Language, Node, Parser, Tree};

// The analyzer's tests name the glob matcher by its former place.
#[cfg(test)]
pub(crate) use super::glob::glob_match;

/// How many alias hops (a name bound to a name bound to ...) are followed where the
/// resolution is on demand (constant strings, shell variables).
pub(crate) const MAX_NAME_HOPS: usize = 32;
/// How many times the bottom-up resolution passes over a tree at most (a pass follows any
/// number of aliases bound before their use, and one more hop bound after it).
pub(crate) const MAX_PASSES: usize = 16;
/// How many times code found in a string (`exec("...")`, `bash -c '...'`, `eval "..."`) is
/// parsed again inside code that was itself found in a string.
pub(crate) const MAX_NESTING: usize = 3;
/// Bytes of constant strings built by concatenation per parse.
pub(crate) const CONST_BUDGET: usize = 1 << 22;

/// Parses `code`; `None` only if tree-sitter refuses (it is error tolerant, so in practice
/// only on a grammar/ABI mismatch).
pub(crate) fn parse(language: &Language, code: &str) -> Option<Tree> {
    let mut parser = Parser::new();
    parser.set_language(language).ok()?;
    parser.parse(code, None)
}

/// The source text of a node ("" if the range is not on a char boundary, which tree-sitter
/// does not produce for &str input).
pub(crate) fn text<'c>(node: Node, code: &'c str) -> &'c str {
    code.get(node.byte_range()).unwrap_or("")
}

/// All nodes of a tree, children before their parent and siblings in source order, with
/// the index where each node's subtree starts (a subtree is the contiguous range
/// `start..=index`). Built iteratively; every later walk iterates this list instead of
/// moving a cursor again.
pub(crate) struct Postorder<'t> {
    pub(crate) nodes: Vec<Node<'t>>,
    starts: Vec<usize>,
}

impl<'t> Postorder<'t> {
    pub(crate) fn new(root: Node<'t>) -> Self {
        let mut nodes = Vec::new();
        let mut starts = Vec::new();
        let mut pending = vec![0usize];
        let mut cursor = root.walk();
        let mut depth = 0usize;
        'descend: loop {
            while cursor.goto_first_child() {
                depth += 1;
                pending.push(nodes.len());
            }
            loop {
                starts.push(pending.pop().unwrap_or(nodes.len()));
                nodes.push(cursor.node());
                if depth == 0 {
                    break 'descend;
                }
                if cursor.goto_next_sibling() {
                    pending.push(nodes.len());
                    continue 'descend;
                }
                if !cursor.goto_parent() {
                    break 'descend;
                }
                depth -= 1;
            }
        }
        Postorder { nodes, starts }
    }

    /// For every node whose subtree (itself included) has a node for which `own` gives a
    /// value: node id → the value of the last such node. Linear.
    pub(crate) fn subtree_marks<T: Clone>(
        &self,
        mut own: impl FnMut(Node<'t>) -> Option<T>,
    ) -> HashMap<usize, T> {
        let mut marks = HashMap::new();
        let mut values: Vec<Option<T>> = Vec::with_capacity(self.nodes.len());
        let mut last: Option<usize> = None;
        for (i, node) in self.nodes.iter().enumerate() {
            let value = own(*node);
            if value.is_some() {
                last = Some(i);
            }
            values.push(value);
            let start = self.starts.get(i).copied().unwrap_or(i);
            if let Some(found) = last.filter(|l| *l >= start) {
                if let Some(Some(v)) = values.get(found) {
                    marks.insert(node.id(), v.clone());
                }
            }
        }
        marks
    }
}

/// The named children of a node, comments left out.
pub(crate) fn named_children(node: Node) -> Vec<Node> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor)
        .filter(|c| c.kind() != "comment")
        .collect()
}

/// The children of a node with a field name.
pub(crate) fn field_children<'t>(node: Node<'t>, field: &str) -> Vec<Node<'t>> {
    let mut cursor = node.walk();
    node.children_by_field_name(field, &mut cursor).collect()
}

/// Where the lines of a (possibly re-parsed) piece of code are in the submitted code.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lines {
    /// Row 0 of this code is line `offset + 1` of the submission.
    Offset(usize),
    /// The code is not a verbatim part of the submission (built from a variable or a
    /// concatenation): every finding is reported at this line.
    Fixed(usize),
}

impl Lines {
    /// The 1-based submission line of a 0-based row of this code.
    pub(crate) fn line(self, row: usize) -> usize {
        match self {
            Lines::Offset(offset) => offset.saturating_add(row).saturating_add(1),
            Lines::Fixed(line) => line,
        }
    }

    /// The line mapping of code that starts at `row` of this code.
    pub(crate) fn nested(self, row: usize) -> Lines {
        match self {
            Lines::Offset(offset) => Lines::Offset(offset.saturating_add(row)),
            Lines::Fixed(line) => Lines::Fixed(line),
        }
    }

    /// The submission line of a node.
    pub(crate) fn of(self, node: Node) -> usize {
        self.line(node.start_position().row)
    }
}

/// Collects the findings of one analysis and bounds the work spent re-parsing strings.
pub(crate) struct Ctx<'r> {
    pub(crate) rules: &'r [Rule],
    /// (rule index, finding)
    findings: Vec<(usize, Finding)>,
    seen: HashSet<(usize, usize)>,
    /// Bytes of string-embedded code that may still be re-parsed.
    budget: usize,
    /// Where the submitted Python code's final expression is, from the analyzer's own parse.
    pub(crate) final_expression: Option<FinalExpression>,
}

impl<'r> Ctx<'r> {
    pub(crate) fn new(rules: &'r [Rule], code_len: usize) -> Self {
        Ctx {
            rules,
            findings: Vec::new(),
            seen: HashSet::new(),
            budget: code_len.saturating_mul(2).saturating_add(64 * 1024),
            final_expression: None,
        }
    }

    /// Records that `rule` (an index into `rules`) matched at `line`; `name` fills `{name}`
    /// in the rule's message. One finding per rule and line.
    pub(crate) fn report(&mut self, rule: usize, line: usize, name: &str) {
        let Some(r) = self.rules.get(rule) else {
            return;
        };
        if !self.seen.insert((rule, line)) {
            return;
        }
        let finding = Finding {
            rule: r.id.clone(),
            action: r.action,
            line,
            message: r.message.replace("{name}", name),
        };
        self.findings.push((rule, finding));
    }

    /// Analyzes code found in strings (`exec("...")`, `bash -c '...'`): each distinct source
    /// once, within the re-parse budget (at least 256 bytes per source), its findings
    /// reported at every place it occurs. `analyze` runs the language's analysis with lines
    /// relative to the source (`Lines::Offset(0)`).
    pub(crate) fn analyze_embedded(
        &mut self,
        embedded: Vec<(String, Lines)>,
        mut analyze: impl FnMut(&mut Ctx<'r>, &str),
    ) {
        let mut order: Vec<String> = Vec::new();
        let mut places: HashMap<String, Vec<Lines>> = HashMap::new();
        for (source, lines) in embedded {
            let entry = places.entry(source.clone()).or_default();
            if entry.is_empty() {
                order.push(source);
            }
            entry.push(lines);
        }
        for source in order {
            let cost = source.len().max(256);
            if cost > self.budget {
                continue;
            }
            self.budget -= cost;
            let mut sub = Ctx {
                rules: self.rules,
                findings: Vec::new(),
                seen: HashSet::new(),
                budget: self.budget,
                final_expression: None,
            };
            analyze(&mut sub, &source);
            self.budget = sub.budget;
            for lines in places.get(&source).into_iter().flatten() {
                for (rule, finding) in &sub.findings {
                    let line = lines.line(finding.line.saturating_sub(1));
                    if self.seen.insert((*rule, line)) {
                        self.findings.push((
                            *rule,
                            Finding {
                                line,
                                ..finding.clone()
                            },
                        ));
                    }
                }
            }
        }
    }

    /// The findings, in line order (rules in profile order within a line).
    /// The findings in line order, and the final expression if the parse gave it.
    pub(crate) fn finish(self) -> (Vec<Finding>, Option<FinalExpression>) {
        let mut findings = self.findings;
        findings.sort_by_key(|(rule, f)| (f.line, *rule));
        (
            findings.into_iter().map(|(_, f)| f).collect(),
            self.final_expression,
        )
    }
}

/// Which qualified names are worth tracking: those that are, or may still become (by
/// appending attributes), a name some rule matches or the resolver itself interprets
/// (`getattr`, `require`, `sys.modules`...). Everything else is dropped as soon as it is
/// computed, which keeps candidate sets tiny and means filler names cannot crowd a real
/// one out of a (capped) set.
pub(crate) struct Relevance {
    /// Names that are a whole pattern or end at a `.` within one.
    exact: HashSet<String>,
    /// Any name starting with one of these is relevant.
    prefixes: Vec<String>,
    /// A relevant name followed by one of these is relevant (`f.call` in JavaScript).
    suffixes: &'static [&'static str],
}

impl Relevance {
    /// The longest name tracked.
    const MAX_NAME: usize = 256;

    /// `patterns` are rule globs; `specials` are names whose attributes the resolver reads.
    pub(crate) fn new<'p>(
        patterns: impl IntoIterator<Item = &'p str>,
        specials: &[&str],
        suffixes: &'static [&'static str],
    ) -> Self {
        let mut exact = HashSet::new();
        let mut prefixes = Vec::new();
        for pattern in patterns {
            let literal = match pattern.find(['*', '\\']) {
                Some(i) => {
                    let head = pattern.get(..i).unwrap_or_default();
                    prefixes.push(head.to_string());
                    head
                }
                None => {
                    exact.insert(pattern.to_string());
                    pattern
                }
            };
            for (i, _) in literal.match_indices('.') {
                exact.insert(literal.get(..i).unwrap_or_default().to_string());
            }
        }
        for special in specials {
            exact.insert(special.to_string());
            prefixes.push(format!("{special}."));
            for (i, _) in special.match_indices('.') {
                exact.insert(special.get(..i).unwrap_or_default().to_string());
            }
        }
        prefixes.sort();
        prefixes.dedup();
        Relevance {
            exact,
            prefixes,
            suffixes,
        }
    }

    pub(crate) fn keep(&self, name: &str) -> bool {
        let plain = |n: &str| {
            self.exact.contains(n) || self.prefixes.iter().any(|p| n.starts_with(p.as_str()))
        };
        name.len() <= Self::MAX_NAME
            && (plain(name)
                || self
                    .suffixes
                    .iter()
                    .any(|s| name.strip_suffix(s).is_some_and(plain)))
    }

    /// Sorted, deduplicated, relevant only, capped.
    pub(crate) fn tidy(&self, mut names: Vec<String>) -> Vec<String> {
        names.retain(|n| self.keep(n));
        tidy(names)
    }
}

/// Appends `.suffix` to every candidate name.
pub(crate) fn append(candidates: Vec<String>, suffix: &str) -> Vec<String> {
    candidates
        .into_iter()
        .map(|c| format!("{c}.{suffix}"))
        .collect()
}

/// Sorted, deduplicated and capped, so that alias fan-out stays small.
pub(crate) fn tidy(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names.dedup();
    names.truncate(256);
    names
}

/// Decodes a hexadecimal code point, `None` if invalid.
pub(crate) fn hex_char(digits: &str) -> Option<char> {
    u32::from_str_radix(digits, 16)
        .ok()
        .and_then(char::from_u32)
}
