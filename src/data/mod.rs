//! Training data: packed splits (from `aiperf-data-prep`) loaded per rank — each rank's
//! share of every global batch, seeded per-epoch shuffling, augmentation and normalisation
//! on worker threads with bounded prefetch, and conversion to libtorch tensors.

mod augment;
pub mod device_aug;
mod host_memory;
mod loader;
mod tensor;

pub use aiperf_data_prep::{split_path, Header, Pack};
pub use augment::Augment;
pub(crate) use host_memory::host_slice;
pub use loader::{
    epoch_order, shard_range, Batch, EpochIter, Images, Loader, LoaderConfig, Output,
};

/// Why data could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The packed file is missing, corrupt or of another version.
    #[error(transparent)]
    Pack(#[from] aiperf_data_prep::PrepError),
    /// The loader's settings do not fit the data.
    #[error("data loader: {0}")]
    Config(String),
    /// libtorch refused a tensor operation.
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

/// Opens `<dir>/<split>.aipk`, with a hint to run the data preparation if it is missing.
pub fn open_split(dir: &std::path::Path, split: &str) -> Result<std::sync::Arc<Pack>, DataError> {
    let path = split_path(dir, split);
    if !path.exists() {
        return Err(DataError::Config(format!(
            "{} not found: prepare the dataset first, e.g. `aiperf-data-prep fashion-mnist --src /usr/share/datasets/fashion-mnist --out {}`",
            path.display(),
            dir.display()
        )));
    }
    Ok(std::sync::Arc::new(Pack::open(&path)?))
}

#[cfg(test)]
mod tests;

/// The validation split must hold images of the training split's shape and classes: the
/// records count validation operations at the training input's size.
pub fn same_shape(dir: &std::path::Path, t: &Header, v: &Header) -> anyhow::Result<()> {
    let shape = |h: &Header| format!("{}x{}x{}", h.height, h.width, h.channels);
    if (t.height, t.width, t.channels) != (v.height, v.width, v.channels) {
        anyhow::bail!(
            "{}: train.aipk holds {} images, val.aipk {}: both splits must have one shape (pack them again with aiperf-data-prep)",
            dir.display(),
            shape(t),
            shape(v)
        );
    }
    if v.num_classes != t.num_classes {
        anyhow::bail!(
            "{}: train and val splits have different class counts ({} and {})",
            dir.display(),
            t.num_classes,
            v.num_classes
        );
    }
    Ok(())
}
