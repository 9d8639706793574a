//! Bounds checks for the object-header messages HDF5 1.10 decodes when the reader opens a
//! dataset or an attribute. Its decoders trust the counts and lengths inside a message (an
//! enum's member count, a compound's member names, a dataspace's rank, an attribute's data
//! size, a fill value's size) and read or copy past the message when they are damaged: a
//! segmentation fault. Each check here computes, per the HDF5 file format specification
//! (version 2), how far the decoder will read, and refuses a message it would overrun.

/// How deeply datatypes may nest (compound in array in compound...).
const MAX_NESTING: usize = 16;

/// A bounds-checked view of the file.
pub(crate) struct Bytes<'a>(pub(crate) &'a [u8]);

impl Bytes<'_> {
    /// `N` bytes at `at`.
    pub(crate) fn get<const N: usize>(&self, at: usize) -> Result<[u8; N], String> {
        at.checked_add(N)
            .and_then(|end| self.0.get(at..end))
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| format!("a structure at byte {at} runs past the end of the file"))
    }
    pub(crate) fn u8(&self, at: usize) -> Result<u8, String> {
        Ok(self.get::<1>(at)?[0])
    }
    pub(crate) fn u16(&self, at: usize) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.get(at)?))
    }
    pub(crate) fn u32(&self, at: usize) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.get(at)?))
    }
    pub(crate) fn u64(&self, at: usize) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.get(at)?))
    }
    /// An address that must lie inside the file.
    pub(crate) fn addr(&self, at: usize) -> Result<usize, String> {
        let v = self.u64(at)?;
        usize::try_from(v)
            .ok()
            .filter(|&a| a < self.0.len())
            .ok_or_else(|| format!("address {v} (at byte {at}) is outside the file"))
    }
}

/// `at + n`, refused past `end`.
fn advance(at: usize, n: usize, end: usize, what: &str) -> Result<usize, String> {
    at.checked_add(n)
        .filter(|&p| p <= end)
        .ok_or_else(|| format!("the {what} at byte {at} runs past its message"))
}

/// `n` rounded up to a multiple of 8 (the padding of version-1 structures).
fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// The length of the NUL-terminated name at `at` (with its NUL), which must end before `end`.
fn name_len(b: &Bytes, at: usize, end: usize) -> Result<usize, String> {
    b.0.get(at..end.min(b.0.len()))
        .and_then(|s| s.iter().position(|&c| c == 0))
        .map(|n| n + 1)
        .ok_or_else(|| format!("the name at byte {at} has no end inside its message"))
}

/// Checks the message of type `kind` in `at..end`.
pub(crate) fn check_message(b: &Bytes, kind: u16, at: usize, end: usize) -> Result<(), String> {
    match kind {
        0x01 => dataspace(b, at, end).map(|_| ()),
        0x03 => datatype(b, at, end, 0).map(|_| ()),
        0x04 => {
            let size = b.u32(at)? as usize;
            advance(at + 4, size, end, "fill value").map(|_| ())
        }
        0x05 => fill_value(b, at, end),
        0x07 => {
            let used = usize::from(b.u16(at + 6)?);
            advance(at, 16 + used * 24, end, "external file list").map(|_| ())
        }
        0x08 => layout(b, at, end),
        0x0B => pipeline(b, at, end),
        0x0C => attribute(b, at, end).map(|_| ()),
        0x10 | 0x11 => advance(at, 16, end, "address pair").map(|_| ()),
        0x0D => name_len(b, at, end).map(|_| ()), // a comment: a NUL-terminated string
        _ => advance(at, fixed_len(b, kind, at)?, end, "message").map(|_| ()),
    }
}

/// The bytes HDF5 decodes of the small fixed-form messages (by their flags); 0 for the
/// rest, which it does not decode when the reader opens a dataset or an attribute.
fn fixed_len(b: &Bytes, kind: u16, at: usize) -> Result<usize, String> {
    let flag = |bit: u8, n: usize| -> Result<usize, String> {
        Ok(if b.u8(at + 1)? & bit != 0 { n } else { 0 })
    };
    Ok(match kind {
        0x02 => 2 + flag(1, 8)? + 16 + flag(2, 8)?, // link info
        0x0A => 2 + flag(1, 4)? + flag(2, 4)?,      // group info
        0x0E => 14,                                 // old modification time
        0x12 => 8,                                  // modification time
        0x15 => 2 + flag(1, 2)? + 16 + flag(2, 8)?, // attribute info
        0x16 => 5,                                  // reference count
        _ => 0,
    })
}

/// A dataspace at `at`: (end of its encoding, number of elements).
pub(crate) fn dataspace(b: &Bytes, at: usize, end: usize) -> Result<(usize, u64), String> {
    let (version, rank, flags) = (b.u8(at)?, usize::from(b.u8(at + 1)?), b.u8(at + 2)?);
    let (header, null) = match version {
        1 => (8, false),
        2 => (4, b.u8(at + 3)? == 2),
        v => return Err(format!("dataspace version {v} at byte {at}")),
    };
    if rank > 32 {
        return Err(format!(
            "the dataspace at byte {at} has rank {rank}, above 32"
        ));
    }
    let dims = at + header;
    let sets = if flags & 1 != 0 { 2 } else { 1 };
    let stop = advance(dims, rank * 8 * sets, end, "dataspace")?;
    let elements = (0..rank).try_fold(1u64, |n, d| {
        n.checked_mul(b.u64(dims + 8 * d)?)
            .ok_or_else(|| format!("the dataspace at byte {at} overflows"))
    })?;
    Ok((stop, if null { 0 } else { elements }))
}

/// A datatype at `at`: (end of its encoding, its size in bytes).
pub(crate) fn datatype(
    b: &Bytes,
    at: usize,
    end: usize,
    depth: usize,
) -> Result<(usize, u64), String> {
    if depth > MAX_NESTING {
        return Err(format!("the datatype at byte {at} nests too deeply"));
    }
    let head = b.u8(at)?;
    let (class, version) = (head & 0x0F, head >> 4);
    let bits = b.get::<3>(at + 1)?;
    let size = u64::from(b.u32(at + 4)?);
    let members = usize::from(u16::from_le_bytes([bits[0], bits[1]]));
    let p = advance(at, 8, end, "datatype")?;
    let stop = match class {
        0 | 4 => advance(p, 4, end, "datatype")?,
        1 => advance(p, 12, end, "datatype")?,
        2 => advance(p, 2, end, "datatype")?,
        3 | 7 => p,
        5 => advance(p, usize::from(bits[0]), end, "opaque tag")?,
        6 => compound(b, p, end, depth, version, size, members)?,
        8 => {
            let (mut q, base) = datatype(b, p, end, depth + 1)?;
            for _ in 0..members {
                let n = name_len(b, q, end)?;
                q = advance(q, if version < 3 { pad8(n) } else { n }, end, "enum name")?;
            }
            let values = usize::try_from(base).unwrap_or(usize::MAX);
            advance(q, members.saturating_mul(values), end, "enum values")?
        }
        9 => datatype(b, p, end, depth + 1)?.0,
        10 => {
            let rank = usize::from(b.u8(p)?);
            if rank > 32 {
                return Err(format!("the array type at byte {at} has rank {rank}"));
            }
            let dims = if version < 3 {
                4 + rank * 8
            } else {
                1 + rank * 4
            };
            datatype(b, advance(p, dims, end, "array type")?, end, depth + 1)?.0
        }
        c => return Err(format!("datatype class {c} at byte {at} does not exist")),
    };
    Ok((stop, size))
}

/// The members of a compound datatype of `size` bytes, from `p`: the end of the last one.
fn compound(
    b: &Bytes,
    mut p: usize,
    end: usize,
    depth: usize,
    version: u8,
    size: u64,
    members: usize,
) -> Result<usize, String> {
    // Version 3 encodes a member's offset in as many bytes as the compound's size needs.
    let offset_bytes = (63 - size.max(1).leading_zeros() as usize) / 8 + 1;
    let offset_field = match version {
        1 => 32, // offset, dimensionality, reserved, permutation, reserved, 4 dimensions
        2 => 4,
        3 => offset_bytes,
        v => return Err(format!("compound datatype version {v} at byte {p}")),
    };
    for _ in 0..members {
        let n = name_len(b, p, end)?;
        p = advance(p, if version < 3 { pad8(n) } else { n }, end, "member name")?;
        let width = if version == 3 { offset_bytes } else { 4 };
        let offset = (0..width).try_fold(0u64, |v, i| {
            Ok::<_, String>(v | u64::from(b.u8(p + i)?) << (8 * i))
        })?;
        p = advance(p, offset_field, end, "member")?;
        let (next, member_size) = datatype(b, p, end, depth + 1)?;
        if offset.checked_add(member_size).is_none_or(|e| e > size) {
            return Err(format!(
                "a member at byte {p} lies outside its compound of {size} bytes"
            ));
        }
        p = next;
    }
    Ok(p)
}

/// A fill value message (version 1 to 3).
fn fill_value(b: &Bytes, at: usize, end: usize) -> Result<(), String> {
    let version = b.u8(at)?;
    let sized = match version {
        1 => Some(at + 4),
        2 => (b.u8(at + 3)? != 0).then_some(at + 4),
        3 => (b.u8(at + 1)? & 0x20 != 0).then_some(at + 2),
        v => return Err(format!("fill value version {v} at byte {at}")),
    };
    if let Some(p) = sized {
        let size = b.u32(p)? as usize;
        advance(p + 4, size, end, "fill value")?;
    }
    Ok(())
}

/// A data layout message (versions 1 to 3; version 4 is left to HDF5, which checks it).
fn layout(b: &Bytes, at: usize, end: usize) -> Result<(), String> {
    let version = b.u8(at)?;
    if version == 3 {
        return match b.u8(at + 1)? {
            0 => {
                let size = usize::from(b.u16(at + 2)?);
                advance(at + 4, size, end, "compact data").map(|_| ())
            }
            1 => advance(at, 18, end, "layout").map(|_| ()),
            2 => chunk_dims(b, at, usize::from(b.u8(at + 2)?), at + 11, end),
            c => Err(format!("layout class {c} at byte {at}")),
        };
    }
    if version == 1 || version == 2 {
        let (dims, class) = (usize::from(b.u8(at + 1)?), b.u8(at + 2)?);
        let address = if class == 0 { 0 } else { 8 };
        if class == 2 {
            chunk_dims(b, at, dims, at + 8 + address, end)?;
        }
        let p = advance(at, 8 + address + dims * 4, end, "layout")?;
        if class == 0 {
            let size = b.u32(p)? as usize;
            advance(p + 4, size, end, "compact data")?;
        }
    }
    Ok(())
}

/// The `dims` chunk dimensions at `p` of the layout at `at`: in bounds and positive (HDF5
/// 1.10 divides by them: a zero is a floating-point exception).
fn chunk_dims(b: &Bytes, at: usize, dims: usize, p: usize, end: usize) -> Result<(), String> {
    if !(1..=33).contains(&dims) {
        return Err(format!("the layout at byte {at} has {dims} dimensions"));
    }
    advance(p, dims * 4, end, "layout")?;
    for d in 0..dims {
        if b.u32(p + 4 * d)? == 0 {
            return Err(format!(
                "the layout at byte {at} has a chunk dimension of 0"
            ));
        }
    }
    Ok(())
}

/// A filter pipeline message (versions 1 and 2).
fn pipeline(b: &Bytes, at: usize, end: usize) -> Result<(), String> {
    let (version, filters) = (b.u8(at)?, b.u8(at + 1)?);
    if filters > 32 {
        return Err(format!(
            "the filter pipeline at byte {at} has {filters} filters"
        ));
    }
    let mut p = if version == 1 { at + 8 } else { at + 2 };
    for _ in 0..filters {
        let id = b.u16(p)?;
        let named = version == 1 || id >= 256;
        let name = if named { usize::from(b.u16(p + 2)?) } else { 0 };
        let q = if named { p + 4 } else { p + 2 };
        let values = usize::from(b.u16(q + 2)?);
        let name = if version == 1 { pad8(name) } else { name };
        let padding = if version == 1 && values % 2 == 1 {
            4
        } else {
            0
        };
        p = advance(q + 4, name + values * 4 + padding, end, "filter")?;
    }
    Ok(())
}

/// Where an attribute message's parts are: datatype, dataspace and data, and how many
/// elements the data holds.
pub(crate) struct AttributeParts {
    /// Start of the datatype.
    pub(crate) ty: usize,
    /// Elements of the data.
    pub(crate) elements: u64,
    /// Start of the data.
    pub(crate) data: usize,
}

/// An attribute message (versions 1 to 3): name, datatype, dataspace and data in bounds;
/// its name (lossy UTF-8, without the terminating NUL) and its parts, `None` for one with a
/// shared datatype or dataspace (encoded elsewhere, not checked).
pub(crate) fn attribute(
    b: &Bytes,
    at: usize,
    end: usize,
) -> Result<(String, Option<AttributeParts>), String> {
    let version = b.u8(at)?;
    let (names, types, spaces) = (
        usize::from(b.u16(at + 2)?),
        usize::from(b.u16(at + 4)?),
        usize::from(b.u16(at + 6)?),
    );
    let (header, pad): (usize, fn(usize) -> usize) = match version {
        1 => (8, pad8),
        2 => (8, |n| n),
        3 => (9, |n| n),
        v => return Err(format!("attribute message version {v} at byte {at}")),
    };
    let name = at + header;
    if name_len(b, name, end)? != names {
        return Err(format!(
            "the attribute name at byte {name} does not match its length"
        ));
    }
    let text =
        b.0.get(name..name + names.saturating_sub(1))
            .map(|t| String::from_utf8_lossy(t).into_owned())
            .unwrap_or_default();
    let ty = advance(name, pad(names), end, "attribute")?;
    let space = advance(ty, pad(types), end, "attribute")?;
    let data = advance(space, pad(spaces), end, "attribute")?;
    if version > 1 && b.u8(at + 1)? & 3 != 0 {
        return Ok((text, None));
    }
    let (_, size) = datatype(b, ty, ty + types, 0)?;
    let (_, elements) = dataspace(b, space, space + spaces)?;
    let bytes = elements
        .checked_mul(size)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(usize::MAX);
    advance(data, bytes, end, "attribute data")?;
    Ok((text, Some(AttributeParts { ty, elements, data })))
}
