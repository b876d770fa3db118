//! `sandpit image build [--offline]`: builds the Docker sandbox image, showing progress.

use crate::image;
use std::process::ExitCode;

pub async fn build(offline: bool) -> ExitCode {
    let docker = match crate::backend::docker::connect_engine().await {
        Ok(d) => d,
        Err(e) => {
            eprintln!(
                "sandpit: {} (hint: start dockerd, check DOCKER_HOST, or join the docker group)",
                e.chain()
            );
            return ExitCode::from(super::EXIT_SANDPIT_FAILURE);
        }
    };
    let started = std::time::Instant::now();
    let mut progress = |line: &str| eprintln!("[image] {line}");
    match image::build(&docker, offline, &mut progress).await {
        Ok(()) => {
            eprintln!(
                "sandpit: built {} in {:.0} s",
                image::IMAGE,
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sandpit: image build failed: {e}");
            ExitCode::from(super::EXIT_SANDPIT_FAILURE)
        }
    }
}
