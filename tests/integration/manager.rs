//! The session manager every interface shares: ownership, language checks, limits, the queue,
//! idle expiry and shutdown, on the native backend when it is available (else unsandboxed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use sandpit::backend::{self, BackendChoice};
use sandpit::session::manager::{ManagerConfig, SessionManager};
use sandpit::{ErrorCode, ExecRequest, Language, Status};
use std::sync::Arc;
use std::time::Duration;

async fn manager(config: ManagerConfig) -> Arc<SessionManager> {
    std::env::set_var("SANDPIT_HELPER", common::helper());
    let policy = common::policy();
    let be = match backend::select(
        BackendChoice::Only(backend::BackendKind::Linux),
        &policy,
        &common::helper(),
    )
    .await
    {
        Ok(b) => b,
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but linux is unavailable: {e}"
            );
            eprintln!(
                "SKIPPED linux ({}); using the unsandboxed backend",
                e.message_with_hint()
            );
            backend::select(
                BackendChoice::Only(backend::BackendKind::Unsandboxed),
                &policy,
                &common::helper(),
            )
            .await
            .unwrap()
        }
    };
    SessionManager::with_backend(policy, be, config).expect("manager")
}

fn req(lang: Language, code: &str, session: Option<&str>, user: &str) -> ExecRequest {
    let mut r = ExecRequest::new(lang, code);
    r.session_id = session.map(str::to_string);
    r.user = user.to_string();
    r
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn sessions_keep_state_and_belong_to_their_owner() {
    rt().block_on(async {
        let m = manager(ManagerConfig::default()).await;
        let r = m
            .execute(
                req(Language::Python, "data = [1, 2, 3]", Some("s1"), "alice"),
                None,
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let r = m
            .execute(
                req(Language::Python, "result = sum(data)", Some("s1"), "alice"),
                None,
            )
            .await;
        assert_eq!(r.result, Some(serde_json::json!(6)), "{r:?}");
        assert_eq!(r.session_id.as_deref(), Some("s1"));

        let r = m
            .execute(
                req(Language::Python, "result = data", Some("s1"), "bob"),
                None,
            )
            .await;
        assert_eq!(r.error.map(|e| e.code), Some(ErrorCode::SessionForbidden));
        let r = m
            .execute(req(Language::Javascript, "1", Some("s1"), "alice"), None)
            .await;
        assert_eq!(
            r.error.map(|e| e.code),
            Some(ErrorCode::SessionLanguageMismatch)
        );

        let alice = m.list("alice").await;
        assert_eq!(alice.len(), 1);
        assert_eq!(
            (
                alice[0].session_id.as_str(),
                alice[0].execution_count,
                alice[0].state
            ),
            ("s1", 2, "idle")
        );
        assert!(alice[0].created_at.ends_with('Z'));
        assert!(
            m.list("bob").await.is_empty(),
            "bob sees only his own sessions"
        );
        assert_eq!(
            m.kill("bob", "s1").await.unwrap_err().code(),
            ErrorCode::SessionForbidden
        );
        assert!(m.kill("alice", "s1").await.unwrap());
        assert!(!m.kill("alice", "s1").await.unwrap());
        let r = m
            .execute(
                req(
                    Language::Python,
                    "result = 'data' in globals()",
                    Some("s1"),
                    "alice",
                ),
                None,
            )
            .await;
        assert_eq!(
            r.result,
            Some(serde_json::json!(false)),
            "a killed session starts afresh"
        );
        m.shutdown().await;
    });
}

#[test]
fn one_shot_and_invalid_requests() {
    rt().block_on(async {
        let m = manager(ManagerConfig::default()).await;
        let r = m
            .execute(req(Language::Bash, "echo hi", None, "default"), None)
            .await;
        assert_eq!((r.status, r.stdout.as_str()), (Status::Ok, "hi\n"));
        assert_eq!(
            m.session_count().await,
            0,
            "one-shot executions leave no session"
        );
        let r = m
            .execute(req(Language::Python, "1", Some("../etc"), "default"), None)
            .await;
        assert_eq!(r.error.map(|e| e.code), Some(ErrorCode::InvalidRequest));
        let mut bad = req(Language::Python, "1", None, "default");
        bad.timeout_ms = 5;
        assert_eq!(
            m.execute(bad, None).await.error.map(|e| e.code),
            Some(ErrorCode::InvalidRequest)
        );
        m.shutdown().await;
    });
}

#[test]
fn the_session_cap_holds() {
    rt().block_on(async {
        let m = manager(ManagerConfig {
            max_sessions: 2,
            ..Default::default()
        })
        .await;
        for id in ["a", "b"] {
            assert_eq!(
                m.execute(req(Language::Bash, "true", Some(id), "u"), None)
                    .await
                    .status,
                Status::Ok
            );
        }
        let r = m
            .execute(req(Language::Bash, "true", Some("c"), "u"), None)
            .await;
        assert_eq!(r.error.map(|e| e.code), Some(ErrorCode::SessionLimit));
        assert!(m.kill("u", "a").await.unwrap());
        assert_eq!(
            m.execute(req(Language::Bash, "true", Some("c"), "u"), None)
                .await
                .status,
            Status::Ok
        );
        m.shutdown().await;
    });
}

#[test]
fn the_queue_is_bounded_and_nothing_queued_is_lost() {
    rt().block_on(async {
        let m = manager(ManagerConfig {
            max_concurrent: 1,
            max_queue: 2,
            ..Default::default()
        })
        .await;
        let mut tasks = Vec::new();
        for i in 0..5 {
            let m = m.clone();
            tasks.push(tokio::spawn(async move {
                let r = m
                    .execute(
                        req(Language::Bash, &format!("sleep 1.5; echo {i}"), None, "u"),
                        None,
                    )
                    .await;
                (i, r)
            }));
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        let mut ok = 0;
        let mut full = 0;
        for t in tasks {
            let (i, r) = t.await.unwrap();
            match r.error.as_ref().map(|e| e.code) {
                None => {
                    assert_eq!(r.stdout, format!("{i}\n"));
                    ok += 1;
                }
                Some(ErrorCode::QueueFull) => full += 1,
                other => panic!("unexpected {other:?}: {r:?}"),
            }
        }
        assert_eq!(
            (ok, full),
            (3, 2),
            "one running, two queued and answered, two refused"
        );
        m.shutdown().await;
    });
}

#[test]
fn idle_sessions_expire_and_shutdown_leaves_nothing() {
    rt().block_on(async {
        let m = manager(ManagerConfig {
            idle_ttl: Duration::from_millis(200),
            ..Default::default()
        })
        .await;
        m.execute(req(Language::Python, "x = 1", Some("old"), "u"), None)
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        m.sweep().await;
        assert!(m.list("u").await.is_empty(), "the idle session expired");

        let m = manager(ManagerConfig::default()).await;
        let r = m
            .execute(
                req(
                    Language::Bash,
                    "setsid sleep 31337 >/dev/null 2>&1 < /dev/null & disown; echo ok",
                    Some("d"),
                    "u",
                ),
                None,
            )
            .await;
        assert_eq!(r.stdout, "ok\n", "{r:?}");
        m.shutdown().await;
        let mut left = true;
        for _ in 0..50 {
            left = common::host_process_with("sleep 31337");
            if !left {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if m.backend_name() == "linux" {
            assert!(!left, "a process outlived the manager's shutdown");
        }
    });
}
