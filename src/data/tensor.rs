//! Hands loader batches to libtorch: NCHW float32 images and int64 labels on the training
//! device — the workers' host tensor as it is on the CPU, copied asynchronously from pinned
//! memory to a GPU, or augmented on the device from the stored images.

use tch::{Device, Kind, Tensor};

use super::{Batch, DataError, Images};

impl Batch {
    /// The batch as (images N×C×H×W float32, labels N int64) on `device`.
    pub fn to_tensors(&self, device: Device) -> Result<(Tensor, Tensor), DataError> {
        let labels = Tensor::f_from_slice(&self.labels)?;
        // The labels first: their copy from pageable memory waits for the stream, which then
        // holds only earlier work, not this batch's image copy and augmentation (whose time
        // would otherwise be charged to whoever waits for the labels).
        let labels = if device.is_cuda() {
            labels.f_to_device(device)?
        } else {
            labels
        };
        let images = match &self.images {
            Images::Ready(t) if device.is_cuda() => {
                t.f_to_device_(device, Kind::Float, true, false)?
            }
            Images::Ready(t) => t.shallow_clone(),
            Images::Raw(raw) => raw.augment(device)?,
        };
        Ok((images, labels))
    }

    /// The images as host floats, N·C·H·W in order (for checks and tests; augments raw
    /// batches on the CPU).
    pub fn pixels(&self) -> Result<Vec<f32>, DataError> {
        let (x, _) = self.to_tensors(Device::Cpu)?;
        Ok(Vec::<f32>::try_from(x.f_flatten(0, -1)?)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_keep_shape_values_and_kinds() {
        let values: Vec<f32> = (0..2 * 3 * 2 * 2).map(|v| v as f32 * 0.5).collect();
        let batch = Batch {
            epoch: 0,
            index: 0,
            global_size: 2,
            indices: vec![4, 9],
            images: Images::Ready(Tensor::from_slice(&values).view([2, 3, 2, 2])),
            labels: vec![3, 7],
            shape: [2, 3, 2, 2],
        };
        let (x, y) = batch.to_tensors(Device::Cpu).unwrap();
        assert_eq!(x.size(), vec![2, 3, 2, 2]);
        assert_eq!(x.kind(), Kind::Float);
        assert_eq!(y.kind(), Kind::Int64);
        assert_eq!(x.double_value(&[1, 2, 1, 0]), ((12 + 8 + 2) as f64) * 0.5);
        assert_eq!(Vec::<i64>::try_from(&y).unwrap(), vec![3, 7]);
        assert_eq!(batch.pixels().unwrap(), values);
    }
}
