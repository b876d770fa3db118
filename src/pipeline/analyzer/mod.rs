//! The pre-execution analyzer: per-language rules matched on a tree-sitter syntax tree, so a
//! pattern inside a string literal or a comment does not count, while the obvious aliasing
//! (`import os as o`, `from subprocess import run`, `getattr(os, 'system')`, `require` of a
//! module through a variable, `sudo rm`, `bash -c '...'`) still does.
//!
//! It is defence in depth, not the security boundary (the sandbox is): it catches the usual
//! dangerous calls written plainly or with the usual aliasing, not a determined adversary.
//! The rules are data (`profiles/analyzer/<language>.toml`); what each matcher means and the
//! limits are in `docs/analyzer.md`.
//!
//! - [`Analyzer::analyze`] lists the findings of a piece of code;
//! - [`Analyzer::screen`] applies a [`Mode`]: what blocks, what becomes a warning;
//! - [`validate_package_name`] checks a package name before it reaches pip or npm.

mod bash;
pub(crate) mod glob;
mod javascript;
mod packages;
mod python;
mod rules;
mod scope;
mod syntax;
#[cfg(test)]
mod tests;

pub use crate::policy::pipeline::Mode;
pub use packages::{installer_for, validate_package_name, validate_packages};
pub use rules::{Examples, Rule};

use crate::pipeline::wrapper::final_expression::FinalExpression;
use crate::types::Language;
use serde::{Deserialize, Serialize};

/// What a rule asks for when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Block,
    Warn,
}

/// One rule matching at one line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The rule id, e.g. `python.os-system`.
    pub rule: String,
    /// What the rule asks for.
    pub action: Action,
    /// 1-based line in the submitted code.
    pub line: usize,
    /// Human text, e.g. `os.system() runs a shell command`.
    pub message: String,
}

impl Finding {
    /// The message for `error.message` when blocked, naming rule and line.
    pub fn block_message(&self) -> String {
        format!(
            "blocked by analyzer rule {} at line {}: {}",
            self.rule, self.line, self.message
        )
    }

    /// The line for `ExecResult.warnings`.
    fn warning(&self) -> String {
        match self.action {
            Action::Warn => format!("analyzer: line {}: {} (rule {})", self.line, self.message, self.rule),
            Action::Block => format!(
                "analyzer (would block): line {}: {} (rule {}; runs because the analyzer mode is warn)",
                self.line, self.message, self.rule
            ),
        }
    }
}

/// What to do with a piece of code under a mode.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Screening {
    /// The first blocking finding (only in [`Mode::Block`]); `None` = may run.
    pub blocked: Option<Finding>,
    /// One line per non-blocking finding, for `ExecResult.warnings`. In [`Mode::Warn`],
    /// block-rule findings appear here too, prefixed `analyzer (would block):`.
    pub warnings: Vec<String>,
    /// Every finding (for the audit trail).
    pub findings: Vec<Finding>,
    /// Python: where the code's final expression is, from the analyzer's parse, for the
    /// request header (one parse per cell instead of two); `None` when nothing parsed it.
    pub final_expression: Option<FinalExpression>,
}

/// An invalid rules file.
#[derive(Debug, thiserror::Error)]
pub enum AnalyzerError {
    #[error("analyzer rules {file}: invalid toml: {source}")]
    Toml {
        file: String,
        #[source]
        source: toml::de::Error,
    },
    #[error("analyzer rules {file}: rule {rule}: {message}")]
    Rule {
        file: String,
        rule: String,
        message: String,
    },
    #[error("analyzer rules {file}: invalid JSON: {source}")]
    Json {
        file: String,
        #[source]
        source: serde_json::Error,
    },
}

// The built-in profiles, as `src/build.rs` converts them to JSON (the TOML files are the
// source; `builtin_json_profiles_are_the_toml_ones` checks both give the same rules).
const BUILTIN_PYTHON: &str = include_str!(concat!(env!("OUT_DIR"), "/analyzer-python.json"));
const BUILTIN_JAVASCRIPT: &str =
    include_str!(concat!(env!("OUT_DIR"), "/analyzer-javascript.json"));
const BUILTIN_BASH: &str = include_str!(concat!(env!("OUT_DIR"), "/analyzer-bash.json"));

/// The rules of the three languages. Immutable once built: `Send + Sync`, share it in an `Arc`.
#[derive(Debug, Clone)]
pub struct Analyzer {
    python: LanguageRules,
    javascript: LanguageRules,
    bash: LanguageRules,
}

/// One language's rules: loaded already, or (the built-in profile) parsed at their first use.
/// A run analyzes one language, and parsing all three profiles took ~0.8 ms of every start.
#[derive(Debug, Clone)]
struct LanguageRules {
    /// The built-in profile's file name and text, for a load at first use.
    builtin: Option<(&'static str, &'static str)>,
    /// The rules, or why the built-in profile did not load.
    loaded: std::sync::OnceLock<Result<Vec<Rule>, String>>,
}

impl LanguageRules {
    fn loaded(rules: Vec<Rule>) -> LanguageRules {
        LanguageRules {
            builtin: None,
            loaded: std::sync::OnceLock::from(Ok(rules)),
        }
    }

    fn builtin(file: &'static str, text: &'static str) -> LanguageRules {
        LanguageRules {
            builtin: Some((file, text)),
            loaded: std::sync::OnceLock::new(),
        }
    }

    fn get(&self, language: Language) -> Result<&[Rule], &str> {
        self.loaded
            .get_or_init(|| match self.builtin {
                Some((file, text)) => rules::load_as(rules::Format::Json, language, file, text)
                    .map_err(|e| e.to_string()),
                // Rules given as text were loaded when the analyzer was made (`loaded`).
                None => Ok(Vec::new()),
            })
            .as_deref()
            .map_err(String::as_str)
    }
}

impl Analyzer {
    /// The built-in profile: `profiles/analyzer/{python,javascript,bash}.toml`, embedded, each
    /// parsed at its language's first use. The profiles are a constant of the build, checked
    /// by the tests ([`Analyzer::check_examples`] loads all three); were one ever not to load,
    /// every analysis of its language finds `analyzer.rules-unavailable`, a blocking finding
    /// ([`Analyzer::analyze`]): closed, never silently unscreened.
    pub fn builtin() -> Result<Analyzer, AnalyzerError> {
        Ok(Analyzer {
            python: LanguageRules::builtin("profiles/analyzer/python.toml", BUILTIN_PYTHON),
            javascript: LanguageRules::builtin(
                "profiles/analyzer/javascript.toml",
                BUILTIN_JAVASCRIPT,
            ),
            bash: LanguageRules::builtin("profiles/analyzer/bash.toml", BUILTIN_BASH),
        })
    }

    /// Rules from TOML text, one text per language, parsed now.
    pub fn with_rules(
        python: &str,
        javascript: &str,
        bash: &str,
    ) -> Result<Analyzer, AnalyzerError> {
        Ok(Analyzer {
            python: LanguageRules::loaded(rules::load(Language::Python, "(python rules)", python)?),
            javascript: LanguageRules::loaded(rules::load(
                Language::Javascript,
                "(javascript rules)",
                javascript,
            )?),
            bash: LanguageRules::loaded(rules::load(Language::Bash, "(bash rules)", bash)?),
        })
    }

    fn language_rules(&self, language: Language) -> Result<&[Rule], &str> {
        match language {
            Language::Python => &self.python,
            Language::Javascript => &self.javascript,
            Language::Bash => &self.bash,
        }
        .get(language)
    }

    /// Every finding for `code`, in line order, one per rule and line.
    pub fn analyze(&self, language: Language, code: &str) -> Vec<Finding> {
        self.analyze_cell(language, code).0
    }

    /// [`analyze`](Self::analyze), and for Python the final expression its parse found.
    fn analyze_cell(
        &self,
        language: Language,
        code: &str,
    ) -> (Vec<Finding>, Option<FinalExpression>) {
        let rules = match self.language_rules(language) {
            Ok(rules) => rules,
            Err(why) => {
                let finding = Finding {
                    rule: "analyzer.rules-unavailable".into(),
                    action: Action::Block,
                    line: 1,
                    message: format!("the built-in {language} analyzer rules do not load: {why}"),
                };
                return (vec![finding], None);
            }
        };
        if rules.is_empty() {
            return (Vec::new(), None);
        }
        let mut ctx = syntax::Ctx::new(rules, code.len());
        match language {
            Language::Python => python::analyze(&mut ctx, code),
            Language::Javascript => javascript::analyze(&mut ctx, code),
            Language::Bash => bash::analyze(&mut ctx, code),
        }
        ctx.finish()
    }

    /// [`analyze`](Self::analyze) and apply `mode`. [`Mode::Off`] returns an empty
    /// screening without parsing.
    pub fn screen(&self, language: Language, code: &str, mode: Mode) -> Screening {
        if mode == Mode::Off {
            return Screening::default();
        }
        let (findings, final_expression) = self.analyze_cell(language, code);
        let mut screening = Screening {
            final_expression,
            ..Default::default()
        };
        for finding in &findings {
            match (mode, finding.action) {
                (Mode::Block, Action::Block) => {
                    if screening.blocked.is_none() {
                        screening.blocked = Some(finding.clone());
                    }
                }
                _ => screening.warnings.push(finding.warning()),
            }
        }
        screening.findings = findings;
        screening
    }

    /// Every rule of a language with its examples (none where its rules did not load).
    pub fn rules(&self, language: Language) -> &[Rule] {
        self.language_rules(language).unwrap_or(&[])
    }

    /// Checks every rule's examples (each `match` example yields a finding of that rule, no
    /// `no_match` example does); one line per failure, empty when all hold. For the tests and
    /// `sandpit doctor`.
    pub fn check_examples(&self) -> Vec<String> {
        let mut failures = Vec::new();
        for language in Language::ALL {
            if let Err(why) = self.language_rules(language) {
                failures.push(format!("{language} rules: {why}"));
            }
            for rule in self.rules(language) {
                for example in &rule.examples.matches {
                    if !self
                        .analyze(language, example)
                        .iter()
                        .any(|f| f.rule == rule.id)
                    {
                        failures.push(format!("{}: should match: {example:?}", rule.id));
                    }
                }
                for example in &rule.examples.no_match {
                    if self
                        .analyze(language, example)
                        .iter()
                        .any(|f| f.rule == rule.id)
                    {
                        failures.push(format!("{}: should not match: {example:?}", rule.id));
                    }
                }
            }
        }
        failures
    }
}
