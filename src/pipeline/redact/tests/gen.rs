//! Deterministic generators: a small PRNG, planted secrets of every kind, ordinary output.

use base64::Engine as _;
use sha2::Digest as _;

/// xorshift64* — small, deterministic, good enough for test data.
pub struct Rng(u64);

pub const LOWER: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
pub const DIGITS: &[u8] = b"0123456789";
pub const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
pub const UPPER_ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
pub const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
pub const B64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
pub const HEX: &[u8] = b"0123456789abcdef";
pub const PASSWORD: &[u8] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#%*+-.:=?@^_~";

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    pub fn string(&mut self, alphabet: &[u8], len: usize) -> String {
        (0..len)
            .map(|_| alphabet[self.below(alphabet.len())] as char)
            .collect()
    }
    /// A random string from `alphabet` with at least one digit (real tokens nearly always have).
    pub fn token(&mut self, alphabet: &[u8], len: usize) -> String {
        let mut s: Vec<u8> = self.string(alphabet, len).into_bytes();
        if !s.iter().any(u8::is_ascii_digit) {
            let i = self.below(len);
            s[i] = DIGITS[self.below(10)];
        }
        String::from_utf8(s).unwrap()
    }
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
    pub fn hex(&mut self, len: usize) -> String {
        self.string(HEX, len)
    }
    pub fn uuid(&mut self) -> String {
        let h = self.hex(32).into_bytes();
        let mut h: Vec<char> = h.into_iter().map(char::from).collect();
        h[12] = '4';
        h[16] = *self.pick(&['8', '9', 'a', 'b']);
        let s: String = h.into_iter().collect();
        format!(
            "{}-{}-{}-{}-{}",
            &s[0..8],
            &s[8..12],
            &s[12..16],
            &s[16..20],
            &s[20..32]
        )
    }
}

/// The literal values the test redactors are configured with.
pub struct Literals {
    pub plain: String,
    pub spaced: String,
    pub env: String,
}

impl Literals {
    pub fn new(rng: &mut Rng) -> Self {
        Literals {
            plain: format!("q{}!{}", rng.token(ALNUM, 9), rng.token(ALNUM, 8)),
            spaced: format!(
                "tango {} delta {} mike",
                rng.token(LOWER, 5),
                rng.range(10, 99)
            ),
            env: format!("ENVSECRET-{}", rng.token(ALNUM, 24)),
        }
    }
}

/// A planted secret: the text to insert (one or more lines, no trailing newline) and needles
/// that must never appear in redacted output.
#[derive(Debug, Clone)]
pub struct Planted {
    pub kind: &'static str,
    pub text: String,
    pub needles: Vec<String>,
}

/// Needles of a secret value: its first, middle and last 8 bytes (the whole value if short).
pub fn needles(secret: &str) -> Vec<String> {
    let b = secret.as_bytes();
    if b.len() <= 8 {
        return vec![secret.to_string()];
    }
    let mid = (b.len() - 8) / 2;
    [&b[..8], &b[mid..mid + 8], &b[b.len() - 8..]]
        .iter()
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

pub const KINDS: &[&str] = &[
    "literal",
    "literal-spaced",
    "env-value",
    "aws-access-key-id",
    "aws-secret-access-key",
    "github-classic",
    "github-fine-grained",
    "slack-token",
    "slack-webhook",
    "jwt",
    "authorization-bearer",
    "bearer-inline",
    "basic-auth",
    "url-credentials",
    "openai-project",
    "openai-legacy",
    "anthropic",
    "google-api-key",
    "stripe",
    "gitlab",
    "npm",
    "huggingface",
    "assign-env",
    "assign-json",
    "assign-yaml",
    "assign-python",
    "assign-query",
    "password-quoted",
    "password-json",
    "password-bare",
    "password-prompt",
    "pem-rsa",
    "pem-openssh",
    "pem-ec-inline",
    "pem-encrypted",
    "pem-pgp",
    "pem-json",
];

fn b64url(data: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

fn pem_body(rng: &mut Rng, lines: usize) -> Vec<String> {
    let mut body: Vec<String> = (0..lines).map(|_| rng.token(B64, 64)).collect();
    let last = rng.range(8, 60);
    body.push(format!("{}==", rng.token(B64, last)));
    body
}

fn pem(kind: &str, body: &[String]) -> String {
    format!(
        "-----BEGIN {kind}-----\n{}\n-----END {kind}-----",
        body.join("\n")
    )
}

/// Plants one secret of `kind`.
pub fn plant(rng: &mut Rng, kind: &'static str, lits: &Literals) -> Planted {
    let one = |text: String, secret: &str| Planted {
        kind,
        text,
        needles: needles(secret),
    };
    match kind {
        "literal" => {
            let s = lits.plain.clone();
            one(format!("connecting with {s} now"), &s)
        }
        "literal-spaced" => {
            let s = lits.spaced.clone();
            one(format!("phrase: {s}."), &s)
        }
        "env-value" => {
            let s = lits.env.clone();
            one(format!("value={s};"), &s)
        }
        "aws-access-key-id" => {
            let s = format!(
                "{}{}",
                rng.pick(&["AKIA", "ASIA"]),
                rng.token(UPPER_ALNUM, 16)
            );
            one(format!("aws_access_key_id = {s}"), &s)
        }
        "aws-secret-access-key" => {
            let s = rng.token(B64, 40);
            one(format!("aws_secret_access_key={s}"), &s)
        }
        "github-classic" => {
            let s = format!(
                "gh{}_{}",
                rng.pick(&["p", "o", "u", "s", "r"]),
                rng.token(ALNUM, 36)
            );
            one(
                format!("remote: https://x-access-token:{s}@github.com/o/r"),
                &s,
            )
        }
        "github-fine-grained" => {
            let s = format!(
                "github_pat_{}_{}",
                rng.token(ALNUM, 22),
                rng.token(ALNUM, 59)
            );
            one(format!("export GH_PAT={s}"), &s)
        }
        "slack-token" => {
            let s = format!(
                "xoxb-{}-{}-{}",
                rng.string(DIGITS, 12),
                rng.string(DIGITS, 13),
                rng.token(ALNUM, 24)
            );
            one(format!("client = WebClient(token=\"{s}\")"), &s)
        }
        "slack-webhook" => {
            let s = format!(
                "T{}/B{}/{}",
                rng.token(UPPER_ALNUM, 10),
                rng.token(UPPER_ALNUM, 10),
                rng.token(ALNUM, 24)
            );
            one(
                format!("posting to https://hooks.slack.com/services/{s} -> 200"),
                &s,
            )
        }
        "jwt" => {
            let payload = format!(
                "{{\"sub\":\"{}\",\"iat\":{}}}",
                rng.token(ALNUM, 10),
                rng.range(1_600_000_000, 1_800_000_000)
            );
            let s = format!(
                "{}.{}.{}",
                b64url(br#"{"alg":"HS256","typ":"JWT"}"#),
                b64url(payload.as_bytes()),
                rng.token(B64URL, 43)
            );
            one(
                format!("{{\"access_token\": \"{s}\", \"expires_in\": 3600}}"),
                &s,
            )
        }
        "authorization-bearer" => {
            let s = rng.token(B64URL, 40);
            one(format!("> Authorization: Bearer {s}"), &s)
        }
        "bearer-inline" => {
            let s = format!("ya29.{}", rng.token(B64URL, 60));
            one(format!("headers = {{'auth': 'bearer {s}'}}"), &s)
        }
        "basic-auth" => {
            let creds = format!("svc-user:{}", rng.token(ALNUM, 14));
            let s = base64::engine::general_purpose::STANDARD.encode(creds);
            one(format!("Authorization: Basic {s}"), &s)
        }
        "url-credentials" => {
            let s = format!("{}-{}", rng.token(ALNUM, 10), rng.token(ALNUM, 6));
            one(
                format!("DATABASE_URL=postgresql://app_user:{s}@db.internal:5432/prod"),
                &s,
            )
        }
        "openai-project" => {
            let s = format!("sk-proj-{}", rng.token(B64URL, 120));
            one(format!("openai.api_key = \"{s}\""), &s)
        }
        "openai-legacy" => {
            let s = format!("sk-{}", rng.token(ALNUM, 48));
            one(format!("Incorrect API key provided: {s}."), &s)
        }
        "anthropic" => {
            let s = format!("sk-ant-api03-{}", rng.token(B64URL, 93));
            one(format!("x-api-key: {s}"), &s)
        }
        "google-api-key" => {
            let s = format!("AIza{}", rng.token(B64URL, 35));
            one(
                format!("GET https://maps.googleapis.com/maps/api/geocode/json?key={s}&address=x"),
                &s,
            )
        }
        "stripe" => {
            let s = format!("sk_live_{}", rng.token(ALNUM, 24));
            one(format!("stripe.api_key = '{s}'"), &s)
        }
        "gitlab" => {
            let s = format!("glpat-{}", rng.token(ALNUM, 20));
            one(format!("PRIVATE-TOKEN: {s}"), &s)
        }
        "npm" => {
            let s = format!("npm_{}", rng.token(ALNUM, 36));
            one(format!("//registry.npmjs.org/:_authToken={s}"), &s)
        }
        "huggingface" => {
            let s = format!("hf_{}", rng.token(ALNUM, 34));
            one(format!("login(token='{s}')"), &s)
        }
        "assign-env" => {
            let s = rng.token(ALNUM, 32);
            one(format!("SERVICE_API_KEY={s}"), &s)
        }
        "assign-json" => {
            let s = rng.hex(40);
            one(
                format!("{{\"client_secret\": \"{s}\", \"scope\": \"read\"}}"),
                &s,
            )
        }
        "assign-yaml" => {
            let s = rng.token(B64, 44);
            one(format!("  webhook_secret: {s}"), &s)
        }
        "assign-python" => {
            let s = rng.token(ALNUM, 24);
            one(format!("    self.refresh_token = '{s}'"), &s)
        }
        "assign-query" => {
            let s = rng.token(ALNUM, 28);
            one(
                format!("GET /api/v2/feed?access_token={s}&limit=50 200"),
                &s,
            )
        }
        "password-quoted" => {
            let s = rng.token(PASSWORD, 12);
            one(format!("password = \"{s}\""), &s)
        }
        "password-json" => {
            let s = rng.token(PASSWORD, 10);
            one(
                format!("{{\"username\": \"admin\", \"password\": \"{s}\", \"remember\": true}}"),
                &s,
            )
        }
        "password-bare" => {
            let s = rng.token(ALNUM, 14);
            one(format!("MYSQL_ROOT_PASSWORD={s}"), &s)
        }
        "password-prompt" => {
            let s = format!("{}-{}", rng.token(LOWER, 6), rng.token(DIGITS, 4));
            one(format!("Password: {s}"), &s)
        }
        k if k.starts_with("pem-") => {
            let n = rng.range(3, 12);
            let body = pem_body(rng, n);
            let text = match k {
                "pem-rsa" => pem("RSA PRIVATE KEY", &body),
                "pem-openssh" => pem("OPENSSH PRIVATE KEY", &body),
                "pem-ec-inline" => format!("key={} # ec", pem("EC PRIVATE KEY", &body)),
                "pem-encrypted" => {
                    let mut b = vec![
                        "Proc-Type: 4,ENCRYPTED".to_string(),
                        format!("DEK-Info: AES-128-CBC,{}", rng.hex(32).to_uppercase()),
                        String::new(),
                    ];
                    b.extend(body.iter().cloned());
                    pem("RSA PRIVATE KEY", &b)
                }
                "pem-pgp" => {
                    let mut b = vec![String::new()];
                    b.extend(body.iter().cloned());
                    pem("PGP PRIVATE KEY BLOCK", &b)
                }
                _ => {
                    // JSON-escaped, as json.dumps prints a service-account file
                    let key = pem("PRIVATE KEY", &body).replace('\n', "\\n");
                    format!(
                        "{{\"type\": \"service_account\", \"private_key\": \"{key}\\n\", \"client_email\": \"svc@p.iam.gserviceaccount.com\"}}"
                    )
                }
            };
            let mut needles = Vec::new();
            for line in &body {
                needles.push(line[..16.min(line.len())].to_string());
                needles.push(line[line.len().saturating_sub(16)..].to_string());
            }
            Planted {
                kind,
                text,
                needles,
            }
        }
        other => panic!("unknown kind {other}"),
    }
}

// ------------------------------------------------------------------------------------------
// Ordinary output

pub fn sha256_hex(data: &[u8]) -> String {
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn sha1_like(rng: &mut Rng) -> String {
    rng.hex(40)
}

/// A fake PNG (real signature and IHDR, random payload) as a data URI.
pub fn png_data_uri(rng: &mut Rng, payload: usize) -> String {
    let mut png =
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00\x00\x00\x01\x00\x08\x06\x00\x00\x00"
            .to_vec();
    png.extend(rng.bytes(payload));
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    )
}

const WORDS: &[&str] = &[
    "the",
    "request",
    "completed",
    "in",
    "seconds",
    "with",
    "status",
    "user",
    "file",
    "model",
    "token",
    "key",
    "value",
    "cache",
    "session",
    "password",
    "secret",
    "server",
    "client",
    "data",
    "and",
    "of",
    "to",
    "a",
    "is",
    "for",
    "on",
    "was",
    "batch",
    "epoch",
    "loss",
    "accuracy",
    "training",
    "loaded",
    "rows",
    "columns",
    "error",
    "warning",
    "retry",
    "connection",
    "timeout",
    "bearer",
    "basic",
    "authorization",
    "private",
    "public",
    "access",
    "config",
    "default",
];

pub fn sentence(rng: &mut Rng) -> String {
    let n = rng.range(4, 16);
    let mut words: Vec<String> = (0..n).map(|_| rng.pick(WORDS).to_string()).collect();
    if let Some(first) = words.first_mut() {
        let mut c = first.chars();
        if let Some(f) = c.next() {
            *first = f.to_uppercase().collect::<String>() + c.as_str();
        }
    }
    words.join(" ") + "."
}

/// One line of ordinary output of a random kind (used by the property tests, and by the corpus).
pub fn ordinary_line(rng: &mut Rng) -> String {
    match rng.below(18) {
        0 => rng.uuid(),
        1 => format!(
            "{{\"id\": \"{}\", \"status\": \"ok\", \"count\": {}}}",
            rng.uuid(),
            rng.below(1000)
        ),
        2 => format!("commit {}", sha1_like(rng)),
        3 => format!("sha256:{}", rng.hex(64)),
        4 => format!("{}  data/part-{:05}.parquet", rng.hex(32), rng.below(99999)),
        5 => sentence(rng),
        6 => format!(
            "-rw-r--r-- 1 user user {:>8} Mar {:>2} 12:{:02} file_{}.csv",
            rng.below(10_000_000),
            rng.range(1, 28),
            rng.below(60),
            rng.below(100)
        ),
        7 => format!(
            "epoch {:>3} | loss {:.4} | acc {:.3} | lr {:.1e}",
            rng.below(200),
            rng.below(10000) as f64 / 3333.0,
            rng.below(1000) as f64 / 1000.0,
            1e-4
        ),
        8 => format!("max_tokens = {}", rng.pick(&[256, 1024, 4096, 8192])),
        9 => format!("token_count = {}  # tokens in prompt", rng.below(5000)),
        10 => "résumé — naïve café 日本語テキスト ✓ ünïcödé".to_string(),
        11 => format!(
            "  File \"/usr/lib/python3.11/site-packages/pkg/mod_{}.py\", line {}, in run",
            rng.below(50),
            rng.below(900)
        ),
        12 => format!(
            "https://example.com/api/v1/items/{}?page={}",
            rng.uuid(),
            rng.below(9)
        ),
        13 => {
            let n = rng.range(20, 90);
            let b = base64::engine::general_purpose::STANDARD.encode(rng.bytes(n));
            format!("{{\"thumbnail\": \"{b}\"}}")
        }
        14 => format!(
            "{:>6} {:>6} {:>6.1} {:>6.1} python3 worker.py --shard {}",
            rng.range(100, 99999),
            rng.range(100, 99999),
            rng.below(1000) as f64 / 10.0,
            rng.below(100) as f64 / 10.0,
            rng.below(16)
        ),
        15 => format!("cache_key = user_id  # {}", rng.below(100)),
        16 => format!(
            "Downloading numpy-1.{}.{}-cp311-cp311-manylinux_2_17_x86_64.whl ({}.{} MB)",
            rng.below(27),
            rng.below(5),
            rng.below(20),
            rng.below(10)
        ),
        _ => String::new(),
    }
}
