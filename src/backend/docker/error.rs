//! What can go wrong talking to the Docker engine, keeping the client's error (and the hyper
//! and OS errors under it) as the source, so `sandpit doctor` and error messages can say
//! "Permission denied" instead of "client error (Connect)".

/// A failure of the Docker backend's own layer, folded into the crate error
/// ([`From<DockerError> for crate::Error`]).
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// The client could not be set up for the local socket.
    #[error("cannot reach the Docker engine")]
    Client(#[source] bollard::errors::Error),
    /// Nothing (usable) answers at the socket: no engine, or no permission to talk to it.
    #[error("no Docker engine answers at the local socket")]
    NoEngine(#[source] bollard::errors::Error),
    /// A step of a session container's life failed.
    #[error("{step} the session container")]
    Container {
        step: &'static str,
        #[source]
        source: bollard::errors::Error,
    },
}

impl DockerError {
    /// The whole cause chain in one line, for `doctor`'s facts.
    pub fn chain(&self) -> String {
        crate::error::with_causes(self.to_string(), self)
    }
}

impl From<DockerError> for crate::Error {
    fn from(e: DockerError) -> Self {
        match e {
            DockerError::Client(_) | DockerError::NoEngine(_) => crate::Error::BackendUnavailable {
                backend: "docker".into(),
                reason: e.to_string(),
                source: Some(Box::new(e)),
            },
            DockerError::Container { .. } => crate::Error::Sandbox {
                message: e.to_string(),
                source: Some(Box::new(e)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_chain_reaches_the_message() {
        let io = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = DockerError::NoEngine(bollard::errors::Error::IOError { err: io });
        let chain = e.chain();
        assert!(chain.starts_with("no Docker engine answers"), "{chain}");
        assert!(
            chain.to_lowercase().contains("permission denied"),
            "{chain}"
        );
        let crate_err: crate::Error = e.into();
        assert_eq!(
            crate_err.code(),
            crate::error::ErrorCode::BackendUnavailable
        );
        assert!(crate_err
            .message_with_hint()
            .to_lowercase()
            .contains("permission denied"));
    }
}
