//! Rules as data: the TOML format of `profiles/analyzer/<language>.toml` and its validation.
//!
//! A file is a list of `[[rule]]` tables. Every rule has `id`, `action` (block|warn),
//! `message` (`{name}` is replaced by what matched, e.g. `subprocess.run`), `examples.match`
//! and `examples.no_match`, and the matcher fields of its language (see the `*RuleDef`
//! structs; unknown fields are an error, so a typo cannot silently disable a rule). Names
//! and paths are matched with [`Glob`]s.

use super::glob::{any_glob, Glob};
use super::{Action, AnalyzerError};
use crate::types::Language;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// One rule of a profile.
#[derive(Debug, Clone, Serialize)]
pub struct Rule {
    /// `<language>.<name>`, e.g. `python.os-system`.
    pub id: String,
    pub action: Action,
    /// Human text; `{name}` is replaced by the matched name.
    pub message: String,
    pub examples: Examples,
    #[serde(skip)]
    pub(crate) matcher: Matcher,
}

/// Code snippets a rule must and must not match (checked by the tests and `check_examples`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Examples {
    #[serde(rename = "match")]
    pub matches: Vec<String>,
    pub no_match: Vec<String>,
}

#[derive(Debug, Clone)]
pub(crate) enum Matcher {
    Python(PythonMatcher),
    Javascript(JavascriptMatcher),
    Bash(BashMatcher),
}

// ---- Python ------------------------------------------------------------------------------

/// A constraint on one argument of a call: its value must be a constant string.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ArgSpec {
    /// 0-based position among the positional arguments.
    pub(crate) position: usize,
    /// The keyword the argument may be passed as instead.
    #[serde(default)]
    pub(crate) keyword: Option<String>,
    /// The value matches one of these globs.
    #[serde(default)]
    pub(crate) equals: Vec<Glob>,
    /// The value contains one of these substrings.
    #[serde(default)]
    pub(crate) contains_any: Vec<String>,
    /// The value matches none of these globs.
    #[serde(default)]
    pub(crate) not_equals: Vec<Glob>,
}

impl ArgSpec {
    pub(crate) fn accepts(&self, value: &str) -> bool {
        (self.equals.is_empty() || any_glob(&self.equals, value))
            && (self.contains_any.is_empty()
                || self.contains_any.iter().any(|c| value.contains(c.as_str())))
            && !any_glob(&self.not_equals, value)
    }
}

/// `arg = {...}` or `arg = [{...}, {...}]`: one constraint, or several that must all hold.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum ArgSpecs {
    One(ArgSpec),
    All(Vec<ArgSpec>),
}

impl ArgSpecs {
    fn into_vec(self) -> Vec<ArgSpec> {
        match self {
            ArgSpecs::One(a) => vec![a],
            ArgSpecs::All(v) => v,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct PythonRuleDef {
    id: String,
    action: Action,
    message: String,
    examples: Examples,
    /// Globs on the resolved qualified name of a call's callee (`os.system`, `subprocess.*`).
    #[serde(default)]
    calls: Vec<Glob>,
    /// Method names matched on any receiver (`write_text`).
    #[serde(default)]
    methods: Vec<String>,
    /// With `calls`: argument constraints (all must hold).
    #[serde(default)]
    arg: Option<ArgSpecs>,
    /// With `calls`: the arguments contain a call to one of these (`exec(input())`).
    #[serde(default)]
    inner_calls: Vec<Glob>,
}

#[derive(Debug, Clone)]
pub(crate) struct PythonMatcher {
    pub(crate) calls: Vec<Glob>,
    pub(crate) methods: Vec<String>,
    pub(crate) arg: Vec<ArgSpec>,
    pub(crate) inner_calls: Vec<Glob>,
}

// ---- JavaScript --------------------------------------------------------------------------

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct JavascriptRuleDef {
    id: String,
    action: Action,
    message: String,
    examples: Examples,
    /// Module names (without `node:`) whose loading matches, however it is loaded.
    #[serde(default)]
    modules: Vec<String>,
    /// Globs on the resolved qualified name of a callee or constructor (`process.exit`).
    #[serde(default)]
    calls: Vec<Glob>,
}

#[derive(Debug, Clone)]
pub(crate) struct JavascriptMatcher {
    pub(crate) modules: Vec<String>,
    pub(crate) calls: Vec<Glob>,
}

// ---- bash --------------------------------------------------------------------------------

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExfiltrationSpec {
    /// Commands that send data out (`curl`, `wget`).
    pub(crate) senders: Vec<Glob>,
    /// Paths that must not be sent.
    pub(crate) sensitive: Vec<Glob>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct BashRuleDef {
    id: String,
    action: Action,
    message: String,
    examples: Examples,
    /// Globs on the command's basename, after `sudo`/`env`/`command`/... prefixes.
    #[serde(default)]
    commands: Vec<Glob>,
    /// With `commands`: each group needs one of its flags (`r` = `-r`, `recursive` = `--recursive`).
    #[serde(default)]
    flags_all: Vec<Vec<String>>,
    /// With `commands`: some argument matches one of these globs.
    #[serde(default)]
    args_any: Vec<Glob>,
    /// With `commands`: some operand (a non-option argument) matches one of these globs.
    #[serde(default)]
    operands_any: Vec<Glob>,
    /// A function that calls itself twice, in a pipeline or in the background.
    #[serde(default)]
    fork_bomb: bool,
    /// Sensitive files piped or uploaded to a sender.
    #[serde(default)]
    exfiltration: Option<ExfiltrationSpec>,
    /// Globs on the target of a redirection (`> /dev/sda`, `<> /dev/tcp/...`).
    #[serde(default)]
    redirects: Vec<Glob>,
}

#[derive(Debug, Clone)]
pub(crate) enum BashMatcher {
    Command {
        commands: Vec<Glob>,
        flags_all: Vec<Vec<String>>,
        args_any: Vec<Glob>,
        operands_any: Vec<Glob>,
    },
    ForkBomb,
    Exfiltration(ExfiltrationSpec),
    Redirect(Vec<Glob>),
}

// ---- loading -----------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile<T> {
    #[serde(default = "Vec::new")]
    rule: Vec<T>,
}

/// How a rules text is written: TOML (the profiles, a user's rules), or JSON (the built-in
/// profiles as `src/build.rs` converts them: the same values, parsed several times faster).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Toml,
    Json,
}

fn parse<T: serde::de::DeserializeOwned>(
    format: Format,
    file: &str,
    text: &str,
) -> Result<T, AnalyzerError> {
    match format {
        Format::Toml => toml::from_str(text).map_err(|source| AnalyzerError::Toml {
            file: file.to_string(),
            source,
        }),
        Format::Json => serde_json::from_str(text).map_err(|source| AnalyzerError::Json {
            file: file.to_string(),
            source,
        }),
    }
}

/// Parses and validates the rules of one language. `file` names the source in errors.
pub(crate) fn load(language: Language, file: &str, text: &str) -> Result<Vec<Rule>, AnalyzerError> {
    load_as(Format::Toml, language, file, text)
}

/// [`load`], from a text in `format`.
pub(crate) fn load_as(
    format: Format,
    language: Language,
    file: &str,
    text: &str,
) -> Result<Vec<Rule>, AnalyzerError> {
    let rules = match language {
        Language::Python => {
            let parsed: RulesFile<PythonRuleDef> = parse(format, file, text)?;
            parsed
                .rule
                .into_iter()
                .map(|d| python_rule(file, d))
                .collect::<Result<Vec<_>, _>>()?
        }
        Language::Javascript => {
            let parsed: RulesFile<JavascriptRuleDef> = parse(format, file, text)?;
            parsed
                .rule
                .into_iter()
                .map(|d| javascript_rule(file, d))
                .collect::<Result<Vec<_>, _>>()?
        }
        Language::Bash => {
            let parsed: RulesFile<BashRuleDef> = parse(format, file, text)?;
            parsed
                .rule
                .into_iter()
                .map(|d| bash_rule(file, d))
                .collect::<Result<Vec<_>, _>>()?
        }
    };
    let mut ids = HashSet::new();
    for rule in &rules {
        check_common(language, file, rule)?;
        if !ids.insert(rule.id.as_str()) {
            return Err(rule_err(file, &rule.id, "duplicate rule id"));
        }
    }
    Ok(rules)
}

fn rule_err(file: &str, rule: &str, message: &str) -> AnalyzerError {
    AnalyzerError::Rule {
        file: file.to_string(),
        rule: rule.to_string(),
        message: message.to_string(),
    }
}

fn check_common(language: Language, file: &str, rule: &Rule) -> Result<(), AnalyzerError> {
    let err = |m: &str| Err(rule_err(file, &rule.id, m));
    let prefix = format!("{language}.");
    let valid_id = rule.id.len() > prefix.len()
        && rule.id.starts_with(&prefix)
        && rule
            .id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    if !valid_id {
        return err(&format!(
            "the id must be \"{prefix}<name>\" in lower case (letters, digits, '-', '.')"
        ));
    }
    if rule.message.trim().is_empty() {
        return err("the message is empty");
    }
    if rule.examples.matches.is_empty() || rule.examples.no_match.is_empty() {
        return err("every rule needs examples.match and examples.no_match");
    }
    Ok(())
}

fn check_globs(file: &str, id: &str, what: &str, globs: &[Glob]) -> Result<(), AnalyzerError> {
    if globs.iter().any(|g| g.0.is_empty()) {
        return Err(rule_err(file, id, &format!("{what} has an empty pattern")));
    }
    Ok(())
}

fn python_rule(file: &str, d: PythonRuleDef) -> Result<Rule, AnalyzerError> {
    let err = |m: &str| Err(rule_err(file, &d.id, m));
    if d.calls.is_empty() == d.methods.is_empty() {
        return err("a python rule needs exactly one of calls or methods");
    }
    if d.calls.is_empty() && (d.arg.is_some() || !d.inner_calls.is_empty()) {
        return err("arg and inner_calls only go with calls");
    }
    let args = d.arg.clone().map(ArgSpecs::into_vec).unwrap_or_default();
    if d.arg.is_some() && args.is_empty() {
        return err("arg is an empty list");
    }
    for arg in &args {
        if arg.equals.is_empty() && arg.contains_any.is_empty() {
            return err("arg needs equals or contains_any");
        }
        check_globs(file, &d.id, "arg.equals", &arg.equals)?;
        check_globs(file, &d.id, "arg.not_equals", &arg.not_equals)?;
    }
    if d.methods.iter().any(|m| m.is_empty()) {
        return err("methods has an empty name");
    }
    check_globs(file, &d.id, "calls", &d.calls)?;
    check_globs(file, &d.id, "inner_calls", &d.inner_calls)?;
    Ok(Rule {
        id: d.id,
        action: d.action,
        message: d.message,
        examples: d.examples,
        matcher: Matcher::Python(PythonMatcher {
            calls: d.calls,
            methods: d.methods,
            arg: args,
            inner_calls: d.inner_calls,
        }),
    })
}

fn javascript_rule(file: &str, d: JavascriptRuleDef) -> Result<Rule, AnalyzerError> {
    if d.modules.is_empty() == d.calls.is_empty() {
        return Err(rule_err(
            file,
            &d.id,
            "a javascript rule needs exactly one of modules or calls",
        ));
    }
    if d.modules
        .iter()
        .any(|m| m.is_empty() || m.starts_with("node:"))
    {
        return Err(rule_err(
            file,
            &d.id,
            "modules are named without the node: prefix and not empty",
        ));
    }
    check_globs(file, &d.id, "calls", &d.calls)?;
    Ok(Rule {
        id: d.id,
        action: d.action,
        message: d.message,
        examples: d.examples,
        matcher: Matcher::Javascript(JavascriptMatcher {
            modules: d.modules,
            calls: d.calls,
        }),
    })
}

fn bash_rule(file: &str, d: BashRuleDef) -> Result<Rule, AnalyzerError> {
    let err = |m: &str| Err(rule_err(file, &d.id, m));
    let kinds = [
        !d.commands.is_empty(),
        d.fork_bomb,
        d.exfiltration.is_some(),
        !d.redirects.is_empty(),
    ];
    if kinds.iter().filter(|k| **k).count() != 1 {
        return err(
            "a bash rule needs exactly one of commands, fork_bomb, exfiltration or redirects",
        );
    }
    if d.commands.is_empty()
        && (!d.flags_all.is_empty() || !d.args_any.is_empty() || !d.operands_any.is_empty())
    {
        return err("flags_all, args_any and operands_any only go with commands");
    }
    if d.flags_all
        .iter()
        .any(|g| g.is_empty() || g.iter().any(|f| f.is_empty() || f.starts_with('-')))
    {
        return err("flags_all groups list flags without dashes and are not empty");
    }
    check_globs(file, &d.id, "commands", &d.commands)?;
    check_globs(file, &d.id, "args_any", &d.args_any)?;
    check_globs(file, &d.id, "operands_any", &d.operands_any)?;
    check_globs(file, &d.id, "redirects", &d.redirects)?;
    let matcher = if d.fork_bomb {
        BashMatcher::ForkBomb
    } else if let Some(spec) = d.exfiltration {
        if spec.senders.is_empty() || spec.sensitive.is_empty() {
            return err("exfiltration needs senders and sensitive");
        }
        check_globs(file, &d.id, "exfiltration.senders", &spec.senders)?;
        check_globs(file, &d.id, "exfiltration.sensitive", &spec.sensitive)?;
        BashMatcher::Exfiltration(spec)
    } else if !d.redirects.is_empty() {
        BashMatcher::Redirect(d.redirects)
    } else {
        BashMatcher::Command {
            commands: d.commands,
            flags_all: d.flags_all,
            args_any: d.args_any,
            operands_any: d.operands_any,
        }
    };
    Ok(Rule {
        id: d.id,
        action: d.action,
        message: d.message,
        examples: d.examples,
        matcher: Matcher::Bash(matcher),
    })
}
