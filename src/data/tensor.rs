//! Hands loader batches to libtorch: NCHW float32 images and int64 labels on the training
//! device, staged through pinned host memory when the device is a GPU.

use tch::{Device, Kind, Tensor};

use super::{Batch, DataError};

impl Batch {
    /// The batch as (images N×C×H×W float32, labels N int64) on `device`. For CUDA the host
    /// copy is pinned and the transfer asynchronous.
    pub fn to_tensors(&self, device: Device) -> Result<(Tensor, Tensor), DataError> {
        let dims: Vec<i64> = self
            .shape
            .iter()
            .map(|&d| {
                i64::try_from(d)
                    .map_err(|_| DataError::Config(format!("batch dimension {d} exceeds i64")))
            })
            .collect::<Result<_, _>>()?;
        let images = Tensor::f_from_slice(&self.images)?.f_reshape(&dims)?;
        let labels = Tensor::f_from_slice(&self.labels)?;
        if device.is_cuda() {
            let move_pinned = |t: Tensor| -> Result<Tensor, tch::TchError> {
                t.f_pin_memory(device)?
                    .f_to_device_(device, t.kind(), true, false)
            };
            Ok((move_pinned(images)?, move_pinned(labels)?))
        } else {
            debug_assert_eq!(images.kind(), Kind::Float);
            Ok((images, labels))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_keep_shape_values_and_kinds() {
        let batch = Batch {
            epoch: 0,
            index: 0,
            global_size: 2,
            indices: vec![4, 9],
            images: (0..2 * 3 * 2 * 2).map(|v| v as f32 * 0.5).collect(),
            labels: vec![3, 7],
            shape: [2, 3, 2, 2],
        };
        let (x, y) = batch.to_tensors(Device::Cpu).unwrap();
        assert_eq!(x.size(), vec![2, 3, 2, 2]);
        assert_eq!(x.kind(), Kind::Float);
        assert_eq!(y.kind(), Kind::Int64);
        assert_eq!(x.double_value(&[1, 2, 1, 0]), ((12 + 8 + 2) as f64) * 0.5);
        assert_eq!(Vec::<i64>::try_from(&y).unwrap(), vec![3, 7]);
    }
}
