//! A record file opened for reading, every read guarded against damage before it reaches
//! HDF5's conversions or an allocation: the stored datatype must be exactly the schema's (a
//! damaged compound member offset makes HDF5 1.10's conversion write outside its buffer),
//! datasets must be one-dimensional and no longer than the file could hold (a damaged
//! dimension would otherwise ask for exabytes), the file's structure must pass
//! [`crate::h5guard`] before HDF5 decodes its objects, and text must be UTF-8.

use std::path::{Path, PathBuf};

use hdf5::types::{TypeDescriptor, VarLenUnicode};
use hdf5::{Container, Datatype, File, H5Type};

use crate::error::RecordError;
use crate::h5guard::walk_file;
use crate::schema::{attr, SCHEMA_VERSION};

/// Seconds a lock held by a writer that just died is waited for.
const LOCK_WAIT_S: u64 = 3;

/// One record file, open read-only.
pub(crate) struct Source {
    file: File,
    path: PathBuf,
    len_bytes: u64,
    version: u32,
    /// The root's attribute names as the guard read them from the file's bytes.
    root_attributes: Option<Vec<String>>,
}

/// The oldest schema read (schema 1: no optimizer steps, no digests; scored as unverifiable).
pub(crate) const OLDEST_SCHEMA: u32 = 1;

impl Source {
    /// Opens `path` and checks its schema version. The file's structure is checked first
    /// ([`crate::h5guard`]): HDF5 1.10 decodes the root group's header already when it opens
    /// a file, and a damaged one can crash it there.
    pub(crate) fn open(path: &Path) -> Result<Source, RecordError> {
        let bytes = std::fs::read(path).map_err(|error| RecordError::Io {
            path: path.into(),
            error,
        })?;
        let walked = walk_file(&bytes).map_err(|e| RecordError::Hdf5 {
            path: path.into(),
            message: format!(
                "{e}: the file is damaged (or a run is still writing it; aiperf score reads finished or stopped runs)"
            ),
        })?;
        let mut source = Source {
            file: open_hdf5(path)?,
            path: path.into(),
            len_bytes: bytes.len() as u64,
            version: SCHEMA_VERSION,
            root_attributes: walked.root_attributes,
        };
        let version: u32 = source.attr(attr::SCHEMA_VERSION)?;
        if !(OLDEST_SCHEMA..=SCHEMA_VERSION).contains(&version) {
            return Err(RecordError::Schema {
                path: path.into(),
                found: version,
                expected: SCHEMA_VERSION,
            });
        }
        source.version = version;
        Ok(source)
    }

    /// The file's schema version.
    pub(crate) fn version(&self) -> u32 {
        self.version
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn hdf5(&self, what: &str, e: impl std::fmt::Display) -> RecordError {
        RecordError::Hdf5 {
            path: self.path.clone(),
            message: format!("{what}: {e}"),
        }
    }

    /// Refuses a stored datatype other than `T`'s, before HDF5 converts anything.
    fn expect_type<T: H5Type>(&self, c: &Container, what: &str) -> Result<(), RecordError> {
        let stored = c.dtype().map_err(|e| self.hdf5(what, e))?;
        let expected = Datatype::from_type::<T>().map_err(|e| self.hdf5(what, e))?;
        if stored == expected {
            return Ok(());
        }
        let found = stored.to_descriptor();
        if let (Ok(TypeDescriptor::Compound(have)), TypeDescriptor::Compound(want)) =
            (&found, T::type_descriptor())
        {
            let missing: Vec<&str> = want
                .fields
                .iter()
                .filter(|f| !have.fields.iter().any(|h| h.name == f.name))
                .map(|f| f.name.as_str())
                .collect();
            if !missing.is_empty() {
                return Err(self.hdf5(
                    what,
                    format!(
                        "lacks the field(s) {} that schema {} requires: the file is damaged or was not written by aiperf",
                        missing.join(", "),
                        self.version
                    ),
                ));
            }
            let differs = compound_differences(have, &want);
            if !differs.is_empty() {
                return Err(self.hdf5(
                    what,
                    format!(
                        "is not laid out as schema {} says (results/README.md): {}",
                        self.version,
                        differs.join("; ")
                    ),
                ));
            }
        }
        let found = found.map_or_else(|e| format!("an unreadable type ({e})"), |d| format!("{d}"));
        Err(self.hdf5(
            what,
            format!(
                "stored as {found}, not as schema {} says ({}): the file is damaged or was not written by aiperf",
                self.version,
                T::type_descriptor()
            ),
        ))
    }

    /// The names of every attribute of the file's root.
    /// (From the guard's walk where it walked the file: HDF5 1.10 crashes iterating over
    /// some damaged attribute messages.)
    pub(crate) fn attr_names(&self) -> Result<Vec<String>, RecordError> {
        if let Some(names) = &self.root_attributes {
            return Ok(names.clone());
        }
        self.file
            .attr_names()
            .map_err(|e| self.hdf5("attribute names", e))
    }

    /// The value of the attribute `spec` describes, `None` when it is absent.
    pub(crate) fn attr_value(
        &self,
        spec: &crate::schema::AttrSpec,
    ) -> Result<Option<crate::schema::AttrValue>, RecordError> {
        use crate::schema::{AttrKind, AttrValue};
        if !self.has_attr(spec.name) {
            return Ok(None);
        }
        Ok(Some(match spec.kind {
            AttrKind::U32 => AttrValue::U32(self.attr(spec.name)?),
            AttrKind::U64 => AttrValue::U64(self.attr(spec.name)?),
            AttrKind::F64 => AttrValue::F64(self.attr(spec.name)?),
            AttrKind::Text => AttrValue::Text(self.text(spec.name)?),
        }))
    }

    /// Whether the attribute `name` exists.
    pub(crate) fn has_attr(&self, name: &str) -> bool {
        self.file.attr(name).is_ok()
    }

    /// A scalar attribute of type `T`.
    pub(crate) fn attr<T: H5Type>(&self, name: &str) -> Result<T, RecordError> {
        let what = format!("attribute {name:?}");
        let a = self.file.attr(name).map_err(|e| self.hdf5(&what, e))?;
        self.expect_type::<T>(&a, &what)?;
        a.read_scalar::<T>().map_err(|e| self.hdf5(&what, e))
    }

    /// A text attribute.
    pub(crate) fn text(&self, name: &str) -> Result<String, RecordError> {
        let s: VarLenUnicode = self.attr(name)?;
        utf8(&s).map_err(|e| self.hdf5(&format!("attribute {name:?}"), e))
    }

    /// Every row of the one-dimensional dataset `name`.
    pub(crate) fn rows<T: H5Type>(&self, name: &str) -> Result<Vec<T>, RecordError> {
        let what = format!("dataset {name:?}");
        let ds = self.file.dataset(name).map_err(|e| self.hdf5(&what, e))?;
        self.expect_type::<T>(&ds, &what)?;
        let shape = ds.shape();
        let [n] = shape[..] else {
            return Err(self.hdf5(&what, format!("shape {shape:?}, not one-dimensional")));
        };
        // Every row is stored (no compression, no fill-only chunks in aiperf's files): more
        // rows than the file has bytes for is damage, not data.
        let row_bytes = std::mem::size_of::<T>().max(1) as u64;
        if (n as u64)
            .checked_mul(row_bytes)
            .is_none_or(|b| b > self.len_bytes)
        {
            return Err(self.hdf5(
                &what,
                format!(
                    "claims {n} rows of {row_bytes} bytes, more than the file's {} bytes hold: the file is damaged",
                    self.len_bytes
                ),
            ));
        }
        ds.read_raw::<T>().map_err(|e| self.hdf5(&what, e))
    }

    /// Every row of a text dataset.
    pub(crate) fn text_rows(&self, name: &str) -> Result<Vec<String>, RecordError> {
        self.rows::<VarLenUnicode>(name)?
            .iter()
            .enumerate()
            .map(|(row, s)| {
                utf8(s).map_err(|e| self.hdf5(&format!("dataset {name:?} row {row}"), e))
            })
            .collect()
    }
}

/// How a stored compound differs from the schema's: each member at another offset or of
/// another type, each member the schema does not have, and another row size.
fn compound_differences(
    have: &hdf5::types::CompoundType,
    want: &hdf5::types::CompoundType,
) -> Vec<String> {
    let mut out = Vec::new();
    for w in &want.fields {
        let Some(h) = have.fields.iter().find(|h| h.name == w.name) else {
            continue;
        };
        if h.offset != w.offset || h.ty != w.ty {
            out.push(format!(
                "member {} at byte {} as {}, the schema's at byte {} as {}",
                w.name, h.offset, h.ty, w.offset, w.ty
            ));
        }
    }
    for h in have
        .fields
        .iter()
        .filter(|h| !want.fields.iter().any(|w| w.name == h.name))
    {
        out.push(format!("member {} is not in the schema", h.name));
    }
    if have.size != want.size {
        out.push(format!(
            "rows of {} bytes, the schema's {}",
            have.size, want.size
        ));
    }
    out
}

/// Opens `path` with HDF5. A writer that just died may still hold its lock for a moment (the
/// kernel releases a dead process's file locks after its descriptors), so a lock conflict is
/// retried for up to 3 s before it is reported.
fn open_hdf5(path: &Path) -> Result<File, RecordError> {
    let started = std::time::Instant::now();
    loop {
        match File::open(path) {
            Ok(f) => return Ok(f),
            Err(e)
                if e.to_string().contains("unable to lock file")
                    && started.elapsed() < std::time::Duration::from_secs(LOCK_WAIT_S) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => {
                return Err(RecordError::Hdf5 {
                    path: path.into(),
                    message: format!(
                        "cannot open as HDF5 ({e}); is it a complete aiperf record file? (a run still writing it holds a lock)"
                    ),
                })
            }
        }
    }
}

/// HDF5 hands variable-length strings over unchecked: check them here.
fn utf8(s: &VarLenUnicode) -> Result<String, String> {
    std::str::from_utf8(s.as_bytes())
        .map(str::to_string)
        .map_err(|e| format!("not UTF-8 text ({e}): the file is damaged"))
}
