//! The rlimit layer: always applied, with or without namespaces and cgroups.

use serde::{Deserialize, Serialize};

/// One resource limit, soft = hard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rlimit {
    /// Address space (python, bash): allocations beyond it fail with ENOMEM (MemoryError).
    AddressSpace(u64),
    /// Data segment (node: V8 reserves far more address space than it uses, so `AS` cannot work).
    Data(u64),
    /// Processes of the sandbox uid (per user namespace when one is used).
    Processes(u64),
    /// Largest file the code may write.
    FileSize(u64),
    /// Open file descriptors.
    OpenFiles(u64),
    /// Core dumps: always 0.
    Core(u64),
}

impl Rlimit {
    fn resource(self) -> (rlimit::Resource, u64) {
        match self {
            Rlimit::AddressSpace(v) => (rlimit::Resource::AS, v),
            Rlimit::Data(v) => (rlimit::Resource::DATA, v),
            Rlimit::Processes(v) => (rlimit::Resource::NPROC, v),
            Rlimit::FileSize(v) => (rlimit::Resource::FSIZE, v),
            Rlimit::OpenFiles(v) => (rlimit::Resource::NOFILE, v),
            Rlimit::Core(v) => (rlimit::Resource::CORE, v),
        }
    }

    /// Sets the limit on the calling process.
    pub fn apply(self) -> std::io::Result<()> {
        let (res, v) = self.resource();
        res.set(v, v).map_err(|e| {
            std::io::Error::new(e.kind(), format!("setrlimit({}, {v}): {e}", res.as_name()))
        })
    }
}
