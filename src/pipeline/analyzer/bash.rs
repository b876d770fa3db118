//! bash: rules matched on commands (name and arguments), function definitions, pipelines and
//! redirections of the tree-sitter-bash tree.
//!
//! Every `command` node counts, wherever it is: in `$(...)`, backticks, subshells, `if`/`for`
//! bodies, functions, a `"...$(cmd)..."` string. Words are taken by value: quotes removed,
//! backslashes resolved (`\rm`, `r\m`, `"rm"`, `'r'm` are `rm`), `$'...'` decoded, `$x`/`${x}`
//! replaced when every assignment of `x` in the code gives it the same constant value.
//! A command name is matched on its basename (`/bin/rm` is `rm`) after prefixes that run
//! their operand as a command are skipped (`sudo`, `doas`, `command`, `builtin`, `exec`,
//! `env`, `busybox`, `nice`, `nohup`, `time`, `timeout`, `stdbuf`, `setsid`, `ionice`,
//! `chrt`, `taskset`, `xargs`, `unbuffer`, with their options).
//!
//! Code in a string is parsed again as bash where it is code: `bash -c '...'` (and sh, dash,
//! zsh, ksh, ash, mksh, `su -c`), `eval ...`, a here-document or here-string fed to a shell,
//! and `echo ... | sh`.
//!
//! "Does anything below this node read a sensitive file / run a sender" is answered for all
//! nodes in one bottom-up pass, fork bombs are found in one pass with a stack of the
//! functions being defined, and commands are resolved once: the cost stays linear however
//! the code nests.

use super::glob::{any_glob, Glob};
use super::rules::{BashMatcher, ExfiltrationSpec, Matcher};
use super::syntax::{
    self, field_children, hex_char, named_children, text, Ctx, Lines, Postorder, MAX_NAME_HOPS,
    MAX_NESTING,
};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use tree_sitter::Node;

/// Prefixes that run their operand as a command: (name, options taking a value, leading
/// operands to skip).
const WRAPPERS: &[(&str, &[&str], usize)] = &[
    (
        "sudo",
        &[
            "-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "-R", "--user", "--group",
        ],
        0,
    ),
    ("doas", &["-u", "-C"], 0),
    ("command", &[], 0),
    ("builtin", &[], 0),
    ("exec", &["-a"], 0),
    ("env", &["-u", "-C", "--unset", "--chdir"], 0),
    ("busybox", &[], 0),
    ("nice", &["-n", "--adjustment"], 0),
    ("nohup", &[], 0),
    ("time", &["-f", "-o", "--format", "--output"], 0),
    ("timeout", &["-s", "-k", "--signal", "--kill-after"], 1),
    ("stdbuf", &["-i", "-o", "-e"], 0),
    ("setsid", &[], 0),
    ("ionice", &["-c", "-n", "-p", "-t"], 0),
    ("chrt", &[], 1),
    ("taskset", &[], 1),
    (
        "xargs",
        &["-n", "-P", "-I", "-L", "-s", "-d", "-E", "-a"],
        0,
    ),
    ("unbuffer", &[], 0),
];

/// Stands for an unknown part of a word that is too long to keep as written.
const UNKNOWN: &str = "\u{fffd}";

/// Shells whose `-c` argument (or standard input) is bash code.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "su"];

/// Commands whose arguments are data, not files read (`echo /etc/passwd | curl` sends a string).
const NOT_READERS: &[&str] = &["echo", "printf"];

/// curl/wget options whose value is a file to upload.
const UPLOAD_FILE_OPTIONS: &[&str] = &["-T", "--upload-file", "--post-file", "--body-file"];
/// curl options whose value may be `@file` (or `name@file`, `name=@file`, `name=<file`).
const DATA_OPTIONS: &[&str] = &[
    "-d",
    "--data",
    "--data-binary",
    "--data-ascii",
    "--data-urlencode",
    "-F",
    "--form",
    "--json",
];

type Inherited = HashMap<String, String>;

pub(crate) fn analyze(ctx: &mut Ctx, code: &str) {
    analyze_nested(ctx, code, Lines::Offset(0), &Inherited::new(), 0);
}

fn analyze_nested(ctx: &mut Ctx, code: &str, lines: Lines, inherited: &Inherited, nesting: usize) {
    let Some(tree) = syntax::parse(&tree_sitter_bash::LANGUAGE.into(), code) else {
        return;
    };
    let root = tree.root_node();
    let order = Postorder::new(root);
    let mut vars = Vars::build(&order, code, inherited);
    vars.mark_exfiltration(&order, &exfiltration_rules(ctx));
    find_fork_bombs(ctx, &vars, root, lines);
    let mut embedded: Vec<(String, Lines)> = Vec::new();
    for node in order.nodes.iter().copied() {
        match node.kind() {
            "command" => check_command(ctx, &vars, node, lines, &mut embedded),
            "file_redirect" => check_file_redirect(ctx, &vars, node, lines),
            "pipeline" => check_pipeline(ctx, &vars, node, lines, &mut embedded),
            "redirected_statement" => check_redirected(ctx, &vars, node, lines, &mut embedded),
            _ => {}
        }
    }
    if nesting >= MAX_NESTING || embedded.is_empty() {
        return;
    }
    let exported = vars.export();
    ctx.analyze_embedded(embedded, |sub, source| {
        analyze_nested(sub, source, Lines::Offset(0), &exported, nesting + 1);
    });
}

// ---- commands ----------------------------------------------------------------------------

/// A command after its prefixes: basename, the argument nodes and their values.
struct Cmd<'a> {
    name: String,
    args: Vec<Node<'a>>,
    values: Vec<String>,
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The command a `command` node runs, looking through `sudo`, `env`, ... prefixes
/// (memoised per node).
fn resolve_command<'a>(vars: &Vars<'a>, node: Node<'a>) -> Option<Rc<Cmd<'a>>> {
    if node.kind() != "command" {
        return None;
    }
    if let Some(found) = vars.commands.borrow().get(&node.id()) {
        return found.clone();
    }
    let cmd = find_command(vars, node).map(Rc::new);
    vars.commands.borrow_mut().insert(node.id(), cmd.clone());
    cmd
}

fn find_command<'a>(vars: &Vars<'a>, node: Node<'a>) -> Option<Cmd<'a>> {
    let name_node = node.child_by_field_name("name")?;
    let mut name = basename(&vars.value(name_node).text).to_string();
    let mut args = field_children(node, "argument");
    for _ in 0..16 {
        let Some((_, valued, skip)) = WRAPPERS.iter().find(|(w, _, _)| *w == name) else {
            break;
        };
        let mut i = 0;
        let mut skipped = 0;
        while let Some(arg) = args.get(i) {
            let v = vars.value(*arg).text;
            if v == "--" {
                i += 1;
                break;
            }
            if v.starts_with('-') && v.len() > 1 {
                i += if valued.contains(&v.as_str()) { 2 } else { 1 };
                continue;
            }
            if name == "env" && v.contains('=') {
                i += 1;
                continue;
            }
            if skipped < *skip {
                skipped += 1;
                i += 1;
                continue;
            }
            break;
        }
        let Some(next) = args.get(i) else { break };
        name = basename(&vars.value(*next).text).to_string();
        args = args.get(i + 1..).map(<[Node]>::to_vec).unwrap_or_default();
    }
    let values = args.iter().map(|a| vars.value(*a).text).collect();
    Some(Cmd { name, args, values })
}

/// Options and operands of an argument list (`-rf` = `r`, `f`; `--force`; `--` ends options).
struct Parsed {
    short: HashSet<char>,
    long: HashSet<String>,
    operands: Vec<String>,
}

fn parse_args(values: &[String]) -> Parsed {
    let mut parsed = Parsed {
        short: HashSet::new(),
        long: HashSet::new(),
        operands: Vec::new(),
    };
    let mut options_done = false;
    for v in values {
        if options_done {
            parsed.operands.push(v.clone());
        } else if v == "--" {
            options_done = true;
        } else if let Some(long) = v.strip_prefix("--") {
            parsed
                .long
                .insert(long.split('=').next().unwrap_or(long).to_string());
        } else if v.len() > 1 && v.starts_with('-') {
            parsed.short.extend(v.chars().skip(1));
        } else {
            parsed.operands.push(v.clone());
        }
    }
    parsed
}

fn has_flag(parsed: &Parsed, flag: &str) -> bool {
    let mut chars = flag.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => parsed.short.contains(&c),
        _ => parsed.long.contains(flag),
    }
}

fn check_command<'a>(
    ctx: &mut Ctx,
    vars: &Vars<'a>,
    node: Node<'a>,
    lines: Lines,
    embedded: &mut Vec<(String, Lines)>,
) {
    let Some(cmd) = resolve_command(vars, node) else {
        return;
    };
    let values = &cmd.values;
    let line = lines.of(node);
    let rules = ctx.rules;
    for (index, rule) in rules.iter().enumerate() {
        match &rule.matcher {
            Matcher::Bash(BashMatcher::Command {
                commands,
                flags_all,
                args_any,
                operands_any,
            }) => {
                if !any_glob(commands, &cmd.name) {
                    continue;
                }
                let parsed = parse_args(values);
                let flags_ok = flags_all
                    .iter()
                    .all(|group| group.iter().any(|f| has_flag(&parsed, f)));
                let args_ok = args_any.is_empty() || values.iter().any(|v| any_glob(args_any, v));
                let operands_ok = operands_any.is_empty()
                    || parsed.operands.iter().any(|v| any_glob(operands_any, v));
                if flags_ok && args_ok && operands_ok {
                    ctx.report(index, line, &cmd.name);
                }
            }
            Matcher::Bash(BashMatcher::Exfiltration(spec)) => {
                if !any_glob(&spec.senders, &cmd.name) {
                    continue;
                }
                let uploads = uploads_sensitive(values, &spec.sensitive);
                // `curl -d "$(cat /etc/passwd)"`, `curl ... <<< "$(< /etc/shadow)"`
                let in_args = cmd.args.iter().any(|a| vars.reads(index, *a));
                let in_redirects = field_children(node, "redirect")
                    .iter()
                    .any(|r| vars.reads(index, *r));
                if uploads || in_args || in_redirects {
                    ctx.report(index, line, &cmd.name);
                }
            }
            _ => {}
        }
    }
    // Code in strings.
    if cmd.name == "eval" && !cmd.args.is_empty() {
        let at = match cmd.args.as_slice() {
            [single] => string_lines(*single, lines, line),
            _ => Lines::Fixed(line),
        };
        embedded.push((values.join(" "), at));
    } else if SHELLS.contains(&cmd.name.as_str()) {
        if let Some(i) = shell_script_index(values) {
            if let (Some(arg), Some(script)) = (cmd.args.get(i), values.get(i)) {
                embedded.push((script.clone(), string_lines(*arg, lines, line)));
            }
        } else if reads_stdin_script(values) {
            for redirect in field_children(node, "redirect") {
                push_fed_script(vars, redirect, lines, embedded);
            }
        }
    }
}

/// Where the lines of a string argument are: verbatim literals map to their own lines.
fn string_lines(arg: Node, lines: Lines, line: usize) -> Lines {
    match arg.kind() {
        "word" | "raw_string" | "string" | "ansi_c_string" => {
            lines.nested(arg.start_position().row)
        }
        _ => Lines::Fixed(line),
    }
}

/// For `sh -c SCRIPT`, `bash -ec SCRIPT`, `su -c SCRIPT user`: the index of SCRIPT.
fn shell_script_index(values: &[String]) -> Option<usize> {
    let mut i = 0;
    let mut c_at: Option<usize> = None;
    let mut c_last = false;
    while let Some(v) = values.get(i) {
        if v == "--" {
            i += 1;
            break;
        }
        if v.starts_with("--") {
            i += 1;
            continue;
        }
        if (v.starts_with('-') || v.starts_with('+')) && v.len() > 1 {
            if v == "-o" || v == "+o" {
                i += 2;
                continue;
            }
            if v.starts_with('-') && v.contains('c') {
                c_at = Some(i);
                c_last = v.ends_with('c');
            }
            i += 1;
            continue;
        }
        break;
    }
    let at = c_at?;
    Some(if c_last { at + 1 } else { i })
}

/// A shell with no script operand and no `-c` reads its script from standard input.
fn reads_stdin_script(values: &[String]) -> bool {
    shell_script_index(values).is_none() && parse_args(values).operands.is_empty()
}

/// A here-document or here-string fed to a shell: its text is code.
fn push_fed_script<'a>(
    vars: &Vars<'a>,
    redirect: Node<'a>,
    lines: Lines,
    embedded: &mut Vec<(String, Lines)>,
) {
    match redirect.kind() {
        "heredoc_redirect" => {
            for body in named_children(redirect)
                .into_iter()
                .filter(|c| c.kind() == "heredoc_body")
            {
                embedded.push((
                    text(body, vars.code).to_string(),
                    lines.nested(body.start_position().row),
                ));
            }
        }
        "herestring_redirect" => {
            for value in named_children(redirect) {
                let line = lines.of(value);
                embedded.push((vars.value(value).text, string_lines(value, lines, line)));
            }
        }
        _ => {}
    }
}

// ---- exfiltration ------------------------------------------------------------------------

/// Lexically normalised absolute path (`/etc/./passwd`, `/tmp/../etc//passwd` → `/etc/passwd`).
fn normalize_path(path: &str) -> String {
    if !path.starts_with('/') {
        return path.to_string();
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

fn is_sensitive(path: &str, sensitive: &[Glob]) -> bool {
    !path.is_empty() && (any_glob(sensitive, path) || any_glob(sensitive, &normalize_path(path)))
}

/// curl/wget arguments that upload a file: `-d @FILE`, `-d@FILE`, `--data-binary @FILE`,
/// `--data-urlencode name@FILE`, `-F name=@FILE`, `-F name=<FILE`, `-T FILE`,
/// `--upload-file FILE`, `--post-file=FILE`, `--body-file FILE`.
fn uploads_sensitive(values: &[String], sensitive: &[Glob]) -> bool {
    let mut previous: Option<&str> = None;
    for v in values {
        let mut paths: Vec<&str> = Vec::new();
        if previous.is_some_and(|p| UPLOAD_FILE_OPTIONS.contains(&p)) {
            paths.push(v);
        }
        if let Some((option, value)) = v.split_once('=') {
            if UPLOAD_FILE_OPTIONS.contains(&option) {
                paths.push(value);
            }
        }
        if let Some(rest) = v.strip_prefix("-T") {
            paths.push(rest);
        }
        if let Some(rest) = v.strip_prefix('@') {
            paths.push(rest);
        }
        if let Some(rest) = v.strip_prefix("-d@").or_else(|| v.strip_prefix("-F@")) {
            paths.push(rest);
        }
        for marker in ["=@", "=<"] {
            if let Some((_, rest)) = v.split_once(marker) {
                paths.push(rest);
            }
        }
        if previous.is_some_and(|p| DATA_OPTIONS.contains(&p)) {
            if let Some((_, rest)) = v.split_once('@') {
                paths.push(rest);
            }
        }
        if paths.iter().any(|p| is_sensitive(p, sensitive)) {
            return true;
        }
        previous = Some(v);
    }
    false
}

/// True if this node itself reads a sensitive file: a command (other than echo/printf) with
/// a sensitive argument, or an input redirection from one.
fn reads_itself<'a>(vars: &Vars<'a>, node: Node<'a>, spec: &ExfiltrationSpec) -> bool {
    match node.kind() {
        "command" => resolve_command(vars, node).is_some_and(|cmd| {
            !NOT_READERS.contains(&cmd.name.as_str())
                && cmd.values.iter().any(|v| is_sensitive(v, &spec.sensitive))
        }),
        "file_redirect" => {
            redirect_reads(node)
                && redirect_targets(vars, node)
                    .iter()
                    .any(|t| is_sensitive(t, &spec.sensitive))
        }
        _ => false,
    }
}

/// True for `<` and `<>` redirections.
fn redirect_reads(redirect: Node) -> bool {
    let mut cursor = redirect.walk();
    let reads = redirect
        .children(&mut cursor)
        .any(|c| !c.is_named() && matches!(c.kind(), "<" | "<>"));
    reads
}

fn redirect_targets<'a>(vars: &Vars<'a>, redirect: Node<'a>) -> Vec<String> {
    field_children(redirect, "destination")
        .into_iter()
        .map(|d| vars.value(d).text)
        .collect()
}

fn exfiltration_rules(ctx: &Ctx) -> Vec<(usize, ExfiltrationSpec)> {
    ctx.rules
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match &r.matcher {
            Matcher::Bash(BashMatcher::Exfiltration(spec)) => Some((i, spec.clone())),
            _ => None,
        })
        .collect()
}

/// `cat /etc/passwd | curl -d @- URL`: a sensitive read in a stage before a sender; and
/// `echo 'rm -rf /' | sh`: a script piped into a shell.
fn check_pipeline<'a>(
    ctx: &mut Ctx,
    vars: &Vars<'a>,
    node: Node<'a>,
    lines: Lines,
    embedded: &mut Vec<(String, Lines)>,
) {
    let stages = named_children(node);
    for (index, _) in exfiltration_rules(ctx) {
        let mut earlier_reads = false;
        for stage in &stages {
            if earlier_reads {
                if let Some(sender) = vars.sender(index, *stage) {
                    ctx.report(index, lines.of(*stage), &sender);
                }
            }
            earlier_reads = earlier_reads || vars.reads(index, *stage);
        }
    }
    for pair in stages.windows(2) {
        let [feeder, shell] = pair else { continue };
        let shell = if shell.kind() == "redirected_statement" {
            shell.child_by_field_name("body")
        } else {
            Some(*shell)
        };
        let Some(shell) = shell.and_then(|s| resolve_command(vars, s)) else {
            continue;
        };
        if !SHELLS.contains(&shell.name.as_str()) {
            continue;
        }
        if !reads_stdin_script(&shell.values) {
            continue;
        }
        if let Some(echo) =
            resolve_command(vars, *feeder).filter(|c| NOT_READERS.contains(&c.name.as_str()))
        {
            let words: Vec<String> = echo
                .args
                .iter()
                .map(|a| vars.value(*a).text)
                .skip_while(|w| {
                    echo.name == "echo" && matches!(w.as_str(), "-n" | "-e" | "-E" | "-ne" | "-en")
                })
                .collect();
            embedded.push((words.join(" "), Lines::Fixed(lines.of(*feeder))));
        }
    }
}

/// `curl ... < /etc/passwd` (the redirection wraps the command); a here-document fed to a shell.
fn check_redirected<'a>(
    ctx: &mut Ctx,
    vars: &Vars<'a>,
    node: Node<'a>,
    lines: Lines,
    embedded: &mut Vec<(String, Lines)>,
) {
    let Some(body) = node.child_by_field_name("body") else {
        return;
    };
    let redirects = field_children(node, "redirect");
    for (index, _) in exfiltration_rules(ctx) {
        if redirects.iter().any(|r| vars.reads(index, *r)) {
            if let Some(sender) = vars.sender(index, body) {
                ctx.report(index, lines.of(body), &sender);
            }
        }
    }
    if let Some(shell) = resolve_command(vars, body) {
        if SHELLS.contains(&shell.name.as_str()) && reads_stdin_script(&shell.values) {
            for redirect in redirects {
                push_fed_script(vars, redirect, lines, embedded);
            }
        }
    }
}

// ---- functions and redirections ----------------------------------------------------------

/// Fork bombs: a function whose body calls it at least twice, with a call in a pipeline or
/// something in the background (`:(){ :|:& };:`). One pass over the tree with a stack of
/// the functions being defined.
fn find_fork_bombs<'a>(ctx: &mut Ctx, vars: &Vars<'a>, root: Node<'a>, lines: Lines) {
    struct Frame<'a> {
        name: String,
        node: Node<'a>,
        calls: usize,
        piped: bool,
        background: bool,
    }
    let rules = ctx.rules;
    let Some(index) = rules
        .iter()
        .position(|r| matches!(r.matcher, Matcher::Bash(BashMatcher::ForkBomb)))
    else {
        return;
    };
    let mut frames: Vec<Frame<'a>> = Vec::new();
    let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
    // (node, is a pipeline stage, leaving a function definition)
    let mut stack: Vec<(Node<'a>, bool, bool)> = vec![(root, false, false)];
    let mut cursor = root.walk();
    while let Some((node, stage, leaving)) = stack.pop() {
        if leaving {
            if let Some(frame) = frames.pop() {
                if let Some(indexes) = by_name.get_mut(&frame.name) {
                    indexes.pop();
                }
                if frame.calls >= 2 && (frame.piped || frame.background) {
                    ctx.report(index, lines.of(frame.node), &frame.name);
                }
            }
            continue;
        }
        match node.kind() {
            "function_definition" => {
                let name = node
                    .child_by_field_name("name")
                    .map(|n| vars.value(n).text)
                    .unwrap_or_default();
                by_name.entry(name.clone()).or_default().push(frames.len());
                frames.push(Frame {
                    name,
                    node,
                    calls: 0,
                    piped: false,
                    background: false,
                });
                stack.push((node, false, true));
            }
            "command" => {
                if let Some(cmd) = resolve_command(vars, node) {
                    let at = by_name.get(&cmd.name).and_then(|v| v.last()).copied();
                    if let Some(frame) = at.and_then(|i| frames.get_mut(i)) {
                        frame.calls += 1;
                        frame.piped |= stage;
                    }
                }
            }
            "&" if !node.is_named() => {
                if let Some(frame) = frames.last_mut() {
                    frame.background = true;
                }
            }
            _ => {}
        }
        let child_stage = match node.kind() {
            "pipeline" => true,
            "redirected_statement" => stage,
            _ => false,
        };
        let children: Vec<Node<'a>> = node.children(&mut cursor).collect();
        stack.extend(children.into_iter().rev().map(|c| (c, child_stage, false)));
    }
}

fn check_file_redirect<'a>(ctx: &mut Ctx, vars: &Vars<'a>, node: Node<'a>, lines: Lines) {
    let rules = ctx.rules;
    let mut targets: Option<Vec<String>> = None;
    for (index, rule) in rules.iter().enumerate() {
        if let Matcher::Bash(BashMatcher::Redirect(globs)) = &rule.matcher {
            let targets = targets.get_or_insert_with(|| redirect_targets(vars, node));
            if let Some(t) = targets
                .iter()
                .find(|t| any_glob(globs, t) || any_glob(globs, &normalize_path(t)))
            {
                let t = t.clone();
                ctx.report(index, lines.of(node), &t);
            }
        }
    }
}

// ---- values ------------------------------------------------------------------------------

/// The value of a word: `text` with quotes and escapes resolved and known variables
/// replaced; an unknown expansion stays as written (`$HOME`), and `exact` is then false.
struct Val {
    text: String,
    exact: bool,
}

enum Assigned<'a> {
    Node(Node<'a>),
    Empty,
}

/// Variables, resolved commands and sensitive reads of one parse.
struct Vars<'a> {
    code: &'a str,
    assigned: HashMap<String, Vec<Assigned<'a>>>,
    inherited: &'a Inherited,
    memo: RefCell<HashMap<String, Option<String>>>,
    busy: RefCell<HashSet<String>>,
    commands: RefCell<HashMap<usize, Option<Rc<Cmd<'a>>>>>,
    /// Per exfiltration rule (index): the nodes whose subtree reads a sensitive file.
    sensitive_reads: HashMap<usize, HashMap<usize, ()>>,
    /// Per exfiltration rule (index): the nodes whose subtree runs a sender, with its name.
    senders: HashMap<usize, HashMap<usize, Rc<str>>>,
}

impl<'a> Vars<'a> {
    fn build(order: &Postorder<'a>, code: &'a str, inherited: &'a Inherited) -> Vars<'a> {
        let mut assigned: HashMap<String, Vec<Assigned<'a>>> = HashMap::new();
        for node in &order.nodes {
            if node.kind() == "variable_assignment" {
                if let Some(name) = node.child_by_field_name("name") {
                    let value = node
                        .child_by_field_name("value")
                        .map_or(Assigned::Empty, Assigned::Node);
                    assigned
                        .entry(text(name, code).to_string())
                        .or_default()
                        .push(value);
                }
            }
        }
        Vars {
            code,
            assigned,
            inherited,
            memo: RefCell::new(HashMap::new()),
            busy: RefCell::new(HashSet::new()),
            commands: RefCell::new(HashMap::new()),
            sensitive_reads: HashMap::new(),
            senders: HashMap::new(),
        }
    }

    /// Marks, bottom-up (`order` is post-order), every node whose subtree reads a
    /// sensitive file and every node whose subtree runs a sender, per rule.
    fn mark_exfiltration(&mut self, order: &Postorder<'a>, rules: &[(usize, ExfiltrationSpec)]) {
        for (index, spec) in rules {
            let reads = order.subtree_marks(|n| reads_itself(self, n, spec).then_some(()));
            let senders = order.subtree_marks(|n| {
                resolve_command(self, n)
                    .filter(|c| any_glob(&spec.senders, &c.name))
                    .map(|c| Rc::<str>::from(c.name.as_str()))
            });
            self.sensitive_reads.insert(*index, reads);
            self.senders.insert(*index, senders);
        }
    }

    /// The name of a sender (for rule `index`) run at or below `node`.
    fn sender(&self, index: usize, node: Node<'a>) -> Option<Rc<str>> {
        self.senders.get(&index)?.get(&node.id()).cloned()
    }

    /// True if code at or below `node` reads a file sensitive for rule `index`.
    fn reads(&self, index: usize, node: Node<'a>) -> bool {
        self.sensitive_reads
            .get(&index)
            .is_some_and(|m| m.contains_key(&node.id()))
    }

    fn export(&self) -> Inherited {
        let mut out = self.inherited.clone();
        for name in self.assigned.keys() {
            if let Some(v) = self.var(name, 0) {
                out.insert(name.clone(), v);
            }
        }
        out
    }

    /// The constant value of a variable: every assignment gives it the same exact value.
    fn var(&self, name: &str, depth: usize) -> Option<String> {
        if let Some(found) = self.memo.borrow().get(name) {
            return found.clone();
        }
        if depth > MAX_NAME_HOPS || !self.busy.borrow_mut().insert(name.to_string()) {
            return None;
        }
        let value = match self.assigned.get(name) {
            Some(values) => {
                let mut result: Option<String> = None;
                let mut consistent = true;
                for v in values {
                    let val = match v {
                        Assigned::Node(n) => self.value_at(*n, depth + 1),
                        Assigned::Empty => Val {
                            text: String::new(),
                            exact: true,
                        },
                    };
                    if !val.exact || result.as_ref().is_some_and(|r| *r != val.text) {
                        consistent = false;
                        break;
                    }
                    result = Some(val.text);
                }
                // A value built up by doubling (`b=$a$a; c=$b$b; ...`) stops being followed.
                result.filter(|r| consistent && r.len() <= 1 << 16)
            }
            None => self.inherited.get(name).cloned(),
        };
        self.busy.borrow_mut().remove(name);
        self.memo
            .borrow_mut()
            .insert(name.to_string(), value.clone());
        value
    }

    fn value(&self, node: Node<'a>) -> Val {
        self.value_at(node, 0)
    }

    fn value_at(&self, node: Node<'a>, depth: usize) -> Val {
        // An unknown part: short ones as written (`$HOME`), long ones (a whole `$(...)`) as
        // a placeholder, so that values stay small.
        let raw = || {
            let t = text(node, self.code);
            Val {
                text: if t.len() <= 256 {
                    t.to_string()
                } else {
                    UNKNOWN.to_string()
                },
                exact: false,
            }
        };
        if depth > MAX_NAME_HOPS {
            return raw();
        }
        let d = depth + 1;
        match node.kind() {
            "word" => Val {
                text: unescape_word(text(node, self.code)),
                exact: true,
            },
            "number" => Val {
                text: text(node, self.code).to_string(),
                exact: true,
            },
            "raw_string" => {
                let t = text(node, self.code);
                let inner = t
                    .strip_prefix('\'')
                    .and_then(|s| s.strip_suffix('\''))
                    .unwrap_or(t);
                Val {
                    text: inner.to_string(),
                    exact: true,
                }
            }
            "ansi_c_string" => {
                let t = text(node, self.code);
                let inner = t
                    .strip_prefix("$'")
                    .and_then(|s| s.strip_suffix('\''))
                    .unwrap_or(t);
                Val {
                    text: unescape_ansi_c(inner),
                    exact: true,
                }
            }
            "string" => {
                let mut out = Val {
                    text: String::new(),
                    exact: true,
                };
                for part in named_children(node) {
                    let v = match part.kind() {
                        "string_content" => Val {
                            text: unescape_double_quoted(text(part, self.code)),
                            exact: true,
                        },
                        _ => self.value_at(part, d),
                    };
                    out.text.push_str(&v.text);
                    out.exact &= v.exact;
                }
                out
            }
            "concatenation" | "translated_string" | "command_name" => {
                let mut out = Val {
                    text: String::new(),
                    exact: true,
                };
                for part in named_children(node) {
                    let v = self.value_at(part, d);
                    out.text.push_str(&v.text);
                    out.exact &= v.exact;
                }
                out
            }
            "simple_expansion" | "expansion" => {
                let parts = named_children(node);
                match parts.as_slice() {
                    [name] if name.kind() == "variable_name" => {
                        match self.var(text(*name, self.code), d) {
                            Some(v) => Val {
                                text: v,
                                exact: true,
                            },
                            None => raw(),
                        }
                    }
                    _ => raw(),
                }
            }
            _ => raw(),
        }
    }
}

/// Backslash escapes outside quotes: `\x` is `x`.
fn unescape_word(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\n') => {}
                Some(n) => out.push(n),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Backslash escapes inside double quotes: only before `$`, `` ` ``, `"`, `\` and newline.
fn unescape_double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('$' | '`' | '"' | '\\') => out.extend(chars.next()),
                Some('\n') => {
                    chars.next();
                }
                _ => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `$'...'` escapes.
fn unescape_ansi_c(s: &str) -> String {
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
        let mut digits = |n: usize, radix: u32| -> String {
            (0..n)
                .map_while(|_| chars.next_if(|c| c.is_digit(radix)))
                .collect()
        };
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'e' | 'E' => out.push('\u{1b}'),
            'f' => out.push('\u{c}'),
            'v' => out.push('\u{b}'),
            '\\' | '\'' | '"' | '?' => out.push(e),
            'x' => out.extend(hex_char(&digits(2, 16))),
            'u' => out.extend(hex_char(&digits(4, 16))),
            'U' => out.extend(hex_char(&digits(8, 16))),
            '0'..='7' => {
                let octal = format!("{e}{}", digits(2, 8));
                out.extend(u32::from_str_radix(&octal, 8).ok().and_then(char::from_u32));
            }
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}
