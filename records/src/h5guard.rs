//! Checks, on a file's bytes and before HDF5 opens it, the structures HDF5 1.10 trusts
//! without checking (it has debug assertions there, compiled out of release builds): damage
//! there is a segmentation fault, a floating-point exception, an abort or a loop for ever,
//! not an error. Found by the corruption sweep (`tests/corruption.rs`), each refused here:
//! - global heap collections (where variable-length strings live): an object or the free
//!   space larger than its collection, an object of size 0;
//! - references to them: a heap index the collection lacks, a length other than the
//!   object's;
//! - object headers: every message's bounds ([`crate::h5msg`]: datatypes, dataspaces,
//!   layouts, fill values, attributes…), continuation blocks inside the file;
//! - version-1 B-trees (groups, chunks): nodes met twice or out of level order (HDF5
//!   recurses until the stack overflows); symbol table nodes with more members than room;
//! - local heaps (member names): sizes past the file, damaged free lists, unterminated names.
//!
//! This is a minimal reader of the HDF5 file format (specification version 2, the parts
//! aiperf's writer produces): superblock 0 or 1 with 8-byte addresses, version-1 object
//! headers, version-1 B-trees, symbol table nodes, local heaps and global heap collections.
//! Files with superblock 2 or 3 are left to HDF5, which verifies their metadata checksums;
//! shared messages (not in aiperf's files) are not checked. What remains unchecked is
//! damage that is valid in form but wrong in value (e.g. an address to another object of
//! the right kind), which HDF5 reports as errors or reads as wrong data.

use std::collections::{BTreeMap, HashSet};

use crate::h5msg::{attribute, check_message, dataspace, Bytes};

/// Heap collections found: start → (end, objects by index).
type Heaps = BTreeMap<usize, (usize, BTreeMap<u16, u64>)>;

/// Bounds on the walk, so that a damaged file cannot make it long.
const MAX_BLOCKS: usize = 4096;
/// Deepest B-tree or group nesting walked.
const MAX_DEPTH: usize = 32;

/// Checks the file's object headers (every message), global heaps and variable-length
/// references; returns how many references were checked.
#[cfg(test)]
pub(crate) fn check_file(bytes: &[u8]) -> Result<usize, String> {
    walk_file(bytes).map(|w| w.checked)
}

/// What the walk of a file found.
pub(crate) struct Walked {
    /// Variable-length references checked.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) checked: usize,
    /// The names of the root object's attributes, read from its messages (`None`: the
    /// file's format was not walked: HDF5 checksums it).
    pub(crate) root_attributes: Option<Vec<String>>,
}

/// [`check_file`], also returning the root object's attribute names, so that they are
/// listed without asking HDF5 to iterate over damaged attribute messages.
pub(crate) fn walk_file(bytes: &[u8]) -> Result<Walked, String> {
    let heaps = global_heaps(bytes)?;
    let b = Bytes(bytes);
    // Not HDF5 at byte 0 (HDF5 says so), or superblock 2 or 3, whose metadata carry
    // checksums that HDF5 verifies: nothing to add.
    if !bytes.starts_with(b"\x89HDF\r\n\x1a\n") || b.u8(8)? > 1 {
        return Ok(Walked {
            checked: 0,
            root_attributes: None,
        });
    }
    let sizes = b.get::<2>(13)?;
    if sizes != [8, 8] {
        return Err(format!(
            "the superblock gives {}-byte addresses and {}-byte lengths; aiperf's records use 8",
            sizes[0], sizes[1]
        ));
    }
    let base = if b.u8(8)? == 0 { 24 } else { 28 };
    if b.u64(base)? != 0 {
        return Err("the superblock's base address is not 0, as in aiperf's records".into());
    }
    let leaf_k = usize::from(b.u16(16)?);
    let mut walk = Walk {
        b,
        heaps,
        seen: HashSet::new(),
        checked: 0,
        leaf_k,
        root_attributes: Vec::new(),
    };
    let root = walk.b.addr(base + 40)?;
    walk.object(root, 0)?;
    Ok(Walked {
        checked: walk.checked,
        root_attributes: Some(walk.root_attributes),
    })
}

/// Every global heap collection, walked as HDF5 1.10's decoder walks it.
fn global_heaps(bytes: &[u8]) -> Result<Heaps, String> {
    let b = Bytes(bytes);
    let mut heaps = Heaps::new();
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(4).position(|w| w == b"GCOL") {
        let start = at + found;
        at = start + 1;
        // Version 1 and three reserved zero bytes: anything else is not a collection.
        if bytes.get(start + 4..start + 8) != Some(&[1, 0, 0, 0][..]) {
            continue;
        }
        let size = b.u64(start + 8)?;
        let end = usize::try_from(size)
            .ok()
            .filter(|&s| s >= 4096)
            .and_then(|s| start.checked_add(s))
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| {
                format!("the global heap at byte {start} claims {size} bytes, outside 4096 to the end of the file")
            })?;
        heaps.insert(start, (end, heap_objects(&b, start, end)?));
        // A signature inside a collection is its data.
        at = end;
    }
    Ok(heaps)
}

/// The objects of the collection in `start..end`: index → size.
fn heap_objects(b: &Bytes, start: usize, end: usize) -> Result<BTreeMap<u16, u64>, String> {
    let mut objects = BTreeMap::new();
    let mut p = start + 16;
    while p + 16 <= end {
        let (index, size) = (b.u16(p)?, b.u64(p + 8)?);
        // Index 0 is the free space, whose size includes its header and is not padded.
        let need = if index == 0 {
            Some(size)
        } else {
            size.checked_add(7 + 16).map(|s| s & !7)
        };
        let next = need
            .filter(|&n| n > 0)
            .and_then(|n| usize::try_from(n).ok())
            .and_then(|n| p.checked_add(n))
            .filter(|&next| next <= end)
            .ok_or_else(|| {
                format!("global heap object {index} at byte {p} has size {size}, which does not fit its collection (bytes {start}..{end})")
            })?;
        if index > 0 {
            objects.insert(index, size);
        }
        p = next;
    }
    Ok(objects)
}

/// One message of an object header: type, flags, data range.
struct Message {
    kind: u16,
    flags: u8,
    at: usize,
    end: usize,
}

/// The walk over object headers, from the root group down.
struct Walk<'a> {
    b: Bytes<'a>,
    heaps: Heaps,
    seen: HashSet<usize>,
    checked: usize,
    /// The superblock's group leaf node K.
    leaf_k: usize,
    /// The root object's attribute names.
    root_attributes: Vec<String>,
}

impl Walk<'_> {
    /// Refuses a B-tree node met twice (a loop), before its entries are walked again.
    fn visit_node(&mut self, addr: usize) -> Result<(), String> {
        if self.seen.insert(addr) {
            Ok(())
        } else {
            Err(format!("the B-tree node at byte {addr} is reached twice"))
        }
    }

    /// The messages of the version-1 object header at `addr` (none for another version).
    fn messages(&self, addr: usize) -> Result<Vec<Message>, String> {
        if self.b.u8(addr)? != 1 {
            return Ok(Vec::new());
        }
        let mut blocks = vec![(addr + 16, self.b.u32(addr + 8)? as usize)];
        let mut out = Vec::new();
        let mut i = 0;
        while let Some(&(start, len)) = blocks.get(i) {
            i += 1;
            if i > MAX_BLOCKS {
                return Err(format!("the object header at byte {addr} never ends"));
            }
            let end = start
                .checked_add(len)
                .filter(|&e| e <= self.b.0.len())
                .ok_or_else(|| format!("the object header at byte {addr} runs past the file"))?;
            let mut p = start;
            while p + 8 <= end {
                let (kind, size, flags) = (self.b.u16(p)?, self.b.u16(p + 2)?, self.b.u8(p + 4)?);
                let data_end = p + 8 + usize::from(size);
                if data_end > end {
                    return Err(format!("a message at byte {p} overruns its object header"));
                }
                // Shared messages (flag 2) are encoded elsewhere: not aiperf's form.
                if flags & 2 == 0 {
                    check_message(&self.b, kind, p + 8, data_end)?;
                }
                if kind == 0x10 {
                    blocks.push((self.b.addr(p + 8)?, self.b.u64(p + 16)? as usize));
                }
                out.push(Message {
                    kind,
                    flags,
                    at: p + 8,
                    end: data_end,
                });
                p = data_end;
            }
        }
        Ok(out)
    }

    /// Checks the object at `addr`: its attributes, its data if it is a dataset of strings,
    /// and its members if it is a group.
    fn object(&mut self, addr: usize, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH || !self.seen.insert(addr) {
            return Ok(());
        }
        let messages = self.messages(addr)?;
        // Shared messages (flag 2) live elsewhere: not aiperf's form, not checked.
        let find = |kind| messages.iter().find(|m| m.kind == kind && m.flags & 2 == 0);
        for m in messages.iter().filter(|m| m.kind == 0x0C) {
            if m.flags & 2 != 0 {
                // Not aiperf's form: listed, so that nothing unchecked passes as sealed.
                if depth == 0 {
                    self.root_attributes
                        .push("<a shared attribute message>".into());
                }
                continue;
            }
            let name = self.attribute(m)?;
            if depth == 0 {
                self.root_attributes.push(name);
            }
        }
        if let (Some(ty), Some(space), Some(layout)) = (find(0x03), find(0x01), find(0x08)) {
            let strings = self.vlen_base_size(ty.at)?;
            let rows = dataspace(&self.b, space.at, space.end)?.1;
            self.chunked(layout, rows, strings)?;
        }
        if let Some(table) = find(0x11) {
            let btree = self.b.addr(table.at)?;
            let names = self.local_heap(self.b.addr(table.at + 8)?)?;
            for child in self.group_members(btree, &names, None)? {
                self.object(child, depth + 1)?;
            }
        }
        Ok(())
    }

    /// The size of a string's character if the datatype at `at` is a variable-length one.
    fn vlen_base_size(&self, at: usize) -> Result<Option<u64>, String> {
        if self.b.u8(at)? & 0x0F != 9 {
            return Ok(None);
        }
        Ok(Some(u64::from(self.b.u32(at + 8 + 4)?)))
    }

    /// The variable-length references held by the attribute message `m`; returns its name.
    fn attribute(&mut self, m: &Message) -> Result<String, String> {
        let (name, parts) = attribute(&self.b, m.at, m.end)?;
        let Some(parts) = parts else {
            return Ok(name);
        };
        let Some(base_size) = self.vlen_base_size(parts.ty)? else {
            return Ok(name);
        };
        // In bounds: `attribute` checked that the data fits the message.
        for i in 0..parts.elements as usize {
            self.reference(parts.data + 16 * i, base_size)?;
        }
        Ok(name)
    }

    /// The chunk B-tree of a dataset of `rows` (version-3 chunked layout), and the references
    /// in its chunks if its rows are strings (of characters of `strings` bytes).
    fn chunked(&mut self, layout: &Message, rows: u64, strings: Option<u64>) -> Result<(), String> {
        let b = &self.b;
        if b.u8(layout.at)? != 3 || b.u8(layout.at + 1)? != 2 || b.u8(layout.at + 2)? != 2 {
            return Ok(()); // not a one-dimensional chunked dataset of this form
        }
        if b.u64(layout.at + 3)? == u64::MAX {
            return Ok(()); // no chunk written yet (the undefined address)
        }
        let btree = b.addr(layout.at + 3)?;
        let chunk_rows = u64::from(b.u32(layout.at + 11)?);
        let chunks = self.chunks(btree, None)?;
        let Some(base_size) = strings else {
            return Ok(());
        };
        for (offset, addr, size) in chunks {
            let last = rows.min(offset.saturating_add(chunk_rows));
            let n = last.saturating_sub(offset);
            if n.saturating_mul(16) > size {
                return Err(format!(
                    "the chunk at byte {addr} holds fewer than its {n} strings"
                ));
            }
            for i in 0..n as usize {
                self.reference(addr + 16 * i, base_size)?;
            }
        }
        Ok(())
    }

    /// The header of a version-1 B-tree node of `kind`: (level, entries).
    fn node(&self, addr: usize, kind: u8) -> Result<(u8, usize), String> {
        if self.b.get::<4>(addr)? != *b"TREE" || self.b.u8(addr + 4)? != kind {
            return Err(format!("no B-tree node of type {kind} at byte {addr}"));
        }
        Ok((self.b.u8(addr + 5)?, usize::from(self.b.u16(addr + 6)?)))
    }

    /// A B-tree node of `kind` at `addr`, met for the first time, one level below its
    /// parent's `parent_level` (a root has none): (level, entries). HDF5 descends without
    /// these checks, so a node that points back up recurses until the stack overflows.
    fn tree_node(
        &mut self,
        addr: usize,
        kind: u8,
        parent_level: Option<u8>,
    ) -> Result<(u8, usize), String> {
        let (level, entries) = self.node(addr, kind)?;
        self.visit_node(addr)?;
        if parent_level.is_some_and(|p| p == 0 || level != p - 1) || usize::from(level) > MAX_DEPTH
        {
            return Err(format!(
                "the B-tree node at byte {addr} is at level {level}, below a node at level {parent_level:?}"
            ));
        }
        Ok((level, entries))
    }

    /// Every allocated chunk of a one-dimensional dataset: (first row, address, bytes).
    fn chunks(
        &mut self,
        addr: usize,
        parent_level: Option<u8>,
    ) -> Result<Vec<(u64, usize, u64)>, String> {
        let (level, entries) = self.tree_node(addr, 1, parent_level)?;
        // Key: chunk size (4), filter mask (4), two offsets (8 each); then a child (8).
        let mut out = Vec::new();
        for e in 0..entries {
            let key = addr + 24 + e * 32;
            let child = self.b.addr(key + 24)?;
            if level == 0 {
                let size = u64::from(self.b.u32(key)?);
                if child as u64 + size > self.b.0.len() as u64 {
                    return Err(format!("the chunk at byte {child} runs past the file"));
                }
                out.push((self.b.u64(key + 8)?, child, size));
            } else {
                out.extend(self.chunks(child, Some(level))?);
            }
        }
        Ok(out)
    }

    /// The local heap at `addr` (a group's member names): its data segment, whose free list
    /// HDF5 walks without a bound (a loop there never ends).
    fn local_heap(&self, addr: usize) -> Result<std::ops::Range<usize>, String> {
        if self.b.get::<4>(addr)? != *b"HEAP" || self.b.u8(addr + 4)? != 0 {
            return Err(format!("no local heap at byte {addr}"));
        }
        let size = self.b.u64(addr + 8)?;
        let data = self.b.addr(addr + 24)?;
        let end = usize::try_from(size)
            .ok()
            .and_then(|s| data.checked_add(s))
            .filter(|&e| e <= self.b.0.len())
            .ok_or_else(|| {
                format!("the local heap at byte {addr} claims {size} bytes, past the file")
            })?;
        let (mut free, mut steps) = (self.b.u64(addr + 16)?, 0);
        while free != 1 {
            // A free block: the next one's offset (8), its own size (8); 1 ends the list.
            let block = usize::try_from(free)
                .ok()
                .filter(|&f| f.checked_add(16).is_some_and(|e| e <= end - data))
                .ok_or_else(|| {
                    format!("the local heap at byte {addr} has a free block outside it")
                })?;
            let own = self.b.u64(data + block + 8)?;
            steps += 1;
            if own > size - free || steps > (end - data) / 16 {
                return Err(format!(
                    "the free list of the local heap at byte {addr} is damaged"
                ));
            }
            free = self.b.u64(data + block)?;
        }
        Ok(data..end)
    }

    /// Refuses a name offset into `names` that HDF5 would read past (no NUL before the end).
    fn name(&self, names: &std::ops::Range<usize>, offset: u64) -> Result<(), String> {
        usize::try_from(offset)
            .ok()
            .and_then(|o| names.start.checked_add(o))
            .filter(|&at| at < names.end)
            .and_then(|at| self.b.0[at..names.end].iter().position(|&c| c == 0))
            .map(|_| ())
            .ok_or_else(|| format!("a member name at heap offset {offset} has no end in its heap"))
    }

    /// The object headers of a group's members, from its symbol table B-tree; every key and
    /// member name is checked against the group's local heap `names`.
    fn group_members(
        &mut self,
        addr: usize,
        names: &std::ops::Range<usize>,
        parent_level: Option<u8>,
    ) -> Result<Vec<usize>, String> {
        let (level, entries) = self.tree_node(addr, 0, parent_level)?;
        // Keys (heap offsets, 8 bytes) and children (8) alternate, one key more.
        for e in 0..=entries {
            self.name(names, self.b.u64(addr + 24 + e * 16)?)?;
        }
        let mut out = Vec::new();
        for e in 0..entries {
            let child = self.b.addr(addr + 24 + e * 16 + 8)?;
            if level > 0 {
                out.extend(self.group_members(child, names, Some(level))?);
                continue;
            }
            if self.b.get::<4>(child)? != *b"SNOD" {
                return Err(format!("no symbol table node at byte {child}"));
            }
            // HDF5 decodes the symbols into room for 2 K (the superblock's leaf K).
            let symbols = usize::from(self.b.u16(child + 6)?);
            if symbols > 2 * self.leaf_k {
                return Err(format!(
                    "the symbol table node at byte {child} lists {symbols} members, more than its {} places",
                    2 * self.leaf_k
                ));
            }
            for s in 0..symbols {
                let entry = child + 8 + s * 40;
                self.name(names, self.b.u64(entry)?)?;
                out.push(self.b.addr(entry + 8)?);
            }
        }
        Ok(out)
    }

    /// One reference (length u32, heap address u64, object index u32) at `at`.
    fn reference(&mut self, at: usize, base_size: u64) -> Result<(), String> {
        let (len, heap, index) = (self.b.u32(at)?, self.b.u64(at + 4)?, self.b.u32(at + 12)?);
        if heap == 0 {
            return Ok(()); // a null string: nothing is read
        }
        let object = usize::try_from(heap)
            .ok()
            .and_then(|h| self.heaps.get(&h))
            .ok_or_else(|| format!("the string at byte {at} refers to a global heap at byte {heap}, where there is none"))?
            .1
            .get(&u16::try_from(index).unwrap_or(0))
            .copied();
        match object {
            Some(size) if Some(size) == u64::from(len).checked_mul(base_size) => {
                self.checked += 1;
                // Each reference takes 16 bytes of the file: more is a loop.
                if self.checked > self.b.0.len() / 16 {
                    return Err("more strings than the file can hold".into());
                }
                Ok(())
            }
            Some(size) => Err(format!("the string at byte {at} has length {len}, its heap object {size} bytes")),
            None => Err(format!("the string at byte {at} refers to object {index} of the global heap at byte {heap}, which has none")),
        }
    }
}

#[cfg(test)]
mod tests;
