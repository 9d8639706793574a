//! The errors of dataset conversion and of reading packed files. Every variant names the file
//! it is about and, where it can, what the user should do.

use std::io;
use std::path::PathBuf;

/// Why a conversion or a packed file failed.
#[derive(Debug, thiserror::Error)]
pub enum PrepError {
    /// Reading or writing a file failed at the operating-system level. (The OS error is
    /// part of the message, not a `source`: a chain printer would say it twice.)
    #[error("{path}: {error}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        error: io::Error,
    },
    /// An input file or folder the converter needs does not exist.
    #[error("{path}: not found ({hint})")]
    Missing {
        /// What was looked for.
        path: PathBuf,
        /// What the converter expected there.
        hint: String,
    },
    /// A file does not start with the magic number of its format.
    #[error(
        "{path}: not {format} (magic number {found}, expected {expected}); is this the right file?"
    )]
    BadMagic {
        /// The file concerned.
        path: PathBuf,
        /// The format that was expected.
        format: &'static str,
        /// The magic number that was expected, as text.
        expected: String,
        /// The magic number found, as text.
        found: String,
    },
    /// A file is shorter (or longer) than its own header says.
    #[error("{path}: truncated or corrupt: expected {expected_bytes} bytes, found {found_bytes}; re-download or re-create it")]
    Truncated {
        /// The file concerned.
        path: PathBuf,
        /// The size the header implies.
        expected_bytes: u64,
        /// The size found.
        found_bytes: u64,
    },
    /// The image file and label file of a split hold different numbers of samples.
    #[error("{images}: {n_images} images but {labels}: {n_labels} labels; the two files must come from the same split")]
    CountMismatch {
        /// The image file.
        images: PathBuf,
        /// Images in it.
        n_images: u64,
        /// The label file.
        labels: PathBuf,
        /// Labels in it.
        n_labels: u64,
    },
    /// A label is not a valid class index.
    #[error("{path}: sample {index} has label {label}, outside 0..{num_classes}")]
    LabelOutOfRange {
        /// The file concerned.
        path: PathBuf,
        /// The sample's index in that file.
        index: u64,
        /// The label found.
        label: u64,
        /// The number of classes.
        num_classes: u64,
    },
    /// A JPEG could not be decoded.
    #[error(
        "{path}: unreadable JPEG ({reason}); pass --skip-bad to skip such files and count them"
    )]
    BadJpeg {
        /// The image concerned.
        path: PathBuf,
        /// The decoder's complaint.
        reason: String,
    },
    /// An image is too large to convert within bounded memory (a per-file error, like
    /// [`PrepError::BadJpeg`], that `--skip-bad` skips).
    #[error("{path}: image too large to convert ({reason}); pass --skip-bad to skip such files and count them, or shrink the image")]
    ImageTooLarge {
        /// The image concerned.
        path: PathBuf,
        /// Its size and the limit it exceeds.
        reason: String,
    },
    /// A pack's JSON header disagrees with itself or with the file's layout.
    #[error("{path}: pack header field `{field}` {problem}; the file is corrupt: re-create it with aiperf-data-prep")]
    PackLayout {
        /// The pack concerned.
        path: PathBuf,
        /// The offending field (a JSON header field, or a preamble field such as `header offset`).
        field: &'static str,
        /// What is wrong with it, with the values involved.
        problem: String,
    },
    /// Any other violation of an input format.
    #[error("{path}: {reason}")]
    Format {
        /// The file concerned.
        path: PathBuf,
        /// What is wrong and, where possible, how to fix it.
        reason: String,
    },
}

impl PrepError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        PrepError::Io {
            path: path.into(),
            error: source,
        }
    }

    /// Whether the error concerns one input file only, so that `--skip-bad` may skip it.
    pub fn is_per_file(&self) -> bool {
        matches!(
            self,
            PrepError::BadJpeg { .. } | PrepError::ImageTooLarge { .. }
        )
    }

    /// A format violation in `path`.
    pub fn format(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        PrepError::Format {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

/// Result type of this crate.
pub type Result<T, E = PrepError> = std::result::Result<T, E>;
