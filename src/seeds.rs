//! Seed derivation shared by every seeded component (loader shuffles and augmentation, the
//! architecture search): independent streams from one configured seed.

/// SplitMix64's finaliser: maps nearby inputs (seed, epoch, step numbers) to unrelated
/// 64-bit seeds.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
