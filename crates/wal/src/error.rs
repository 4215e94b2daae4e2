//! The crate's one error type, [`WalError`]. Callers act on the coarse [`WalError::kind`]:
//! `Corrupt` data is never retried from the same bytes (fetch again or fall back to the classic
//! fetch), `Transient` store failures may succeed later, `Invalid` is a caller mistake.

use ferry_objstore::ObjStoreError;

pub type Result<T, E = WalError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    /// The bytes do not start (or end) with the WAL object magic: not a WAL object at all.
    #[error("not a WAL object: bad magic {found:02x?} in the {place}")]
    BadMagic { place: &'static str, found: [u8; 4] },
    /// A WAL object written by a newer format this reader does not know.
    #[error("unsupported WAL object format version {version} (this reader knows {known})")]
    UnsupportedVersion { version: u16, known: u16 },
    /// Fewer bytes than the layout requires: a cut-off download or a short object.
    #[error("truncated {what}: need {needed} bytes, have {available}")]
    Truncated {
        what: &'static str,
        needed: u64,
        available: u64,
    },
    /// A CRC-32C did not match: the bytes changed after they were written.
    #[error("checksum mismatch in {what}: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch {
        what: String,
        stored: u32,
        computed: u32,
    },
    /// The bytes are well-framed but describe an impossible layout.
    #[error("corrupt {what}: {reason}")]
    Corrupt { what: &'static str, reason: String },
    /// An object must hold at least one slice.
    #[error("a WAL object must hold at least one slice")]
    EmptyObject,
    /// A caller handed in something the format cannot hold.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// A metadata record could not be decoded.
    #[error("bad {what} of a __remote_wal_log_metadata record: {reason}")]
    BadMetadata { what: &'static str, reason: String },
    /// The follower's log refused an append (e.g. it no longer ends where the slice begins).
    #[error("follower append refused: {0}")]
    Append(String),
    /// The object store failed.
    #[error(transparent)]
    Store(#[from] ObjStoreError),
}

/// Coarse classes of [`WalError`], the part callers are meant to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Stored or downloaded bytes are damaged or of an unknown format; the same bytes will never
    /// parse. A follower falls back to the classic fetch for the range.
    Corrupt,
    /// The object store may succeed if asked again.
    Transient,
    /// A caller mistake; retrying the same call cannot help.
    Invalid,
    /// The object (or something it needs) is gone.
    NotFound,
    /// Anything else.
    Internal,
}

impl WalError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::BadMagic { .. }
            | Self::UnsupportedVersion { .. }
            | Self::Truncated { .. }
            | Self::ChecksumMismatch { .. }
            | Self::Corrupt { .. }
            | Self::BadMetadata { .. } => ErrorKind::Corrupt,
            Self::EmptyObject | Self::Invalid(_) => ErrorKind::Invalid,
            Self::Append(_) => ErrorKind::Internal,
            Self::Store(e) => match e.kind() {
                ferry_objstore::ErrorKind::Transient => ErrorKind::Transient,
                ferry_objstore::ErrorKind::NotFound => ErrorKind::NotFound,
                ferry_objstore::ErrorKind::Invalid => ErrorKind::Invalid,
                _ => ErrorKind::Internal,
            },
        }
    }

    /// Whether the same call may succeed if tried again.
    pub fn is_retriable(&self) -> bool {
        self.kind() == ErrorKind::Transient
    }

    pub(crate) fn corrupt(what: &'static str, reason: impl Into<String>) -> Self {
        Self::Corrupt {
            what,
            reason: reason.into(),
        }
    }
}
