//! What a forger does after editing records, from `results/README.md` alone: every carried
//! digest recomputed, every chain end and group's ranks re-recorded, and the run digest
//! recomputed over the attributes as they stand. Shared by the record tests and the audit's.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::Path;

use aiperf_records::digest::{self, ChainEnd, GroupChain};
use aiperf_records::schema::{
    attr, AttrKind, AttrValue, EpochRow, MonitorRow, StepRow, TpeRow, TraceRow, TrialRow,
    PRIMARY_FILE,
};
use hdf5::types::VarLenUnicode;
use hdf5::H5Type;

pub fn text_attr(f: &hdf5::File, name: &str) -> Option<String> {
    let a = f.attr(name).ok()?;
    let t: VarLenUnicode = a.read_scalar().unwrap();
    Some(t.as_str().to_owned())
}

pub fn write_text(f: &hdf5::File, name: &str, value: &str) {
    if f.attr(name).is_ok() {
        f.delete_attr(name).unwrap();
    }
    let v: VarLenUnicode = value.parse().unwrap();
    f.new_attr::<VarLenUnicode>()
        .create(name)
        .unwrap()
        .write_scalar(&v)
        .unwrap();
}

pub fn rewrite<T: H5Type>(f: &hdf5::File, name: &str, rows: &[T]) {
    let ds = f.dataset(name).unwrap();
    ds.resize(rows.len()).unwrap();
    ds.write_raw(rows).unwrap();
}

/// Re-seals one dataset whose rows carry digests; returns its chain end.
fn reseal_carried<T: digest::Carried>(f: &hdf5::File, file: &str, name: &str) -> ChainEnd {
    let mut rows: Vec<T> = f.dataset(name).unwrap().read_raw().unwrap();
    let last = digest::seal(digest::chain_seed(file, name), &mut rows);
    rewrite(f, name, &rows);
    ChainEnd::new(name, rows.len() as u64, &last)
}

fn end_of<T: H5Type>(f: &hdf5::File, file: &str, name: &str) -> ChainEnd {
    let rows: Vec<T> = f.dataset(name).unwrap().read_raw().unwrap();
    ChainEnd::new(
        name,
        rows.len() as u64,
        &digest::chain(digest::chain_seed(file, name), &rows),
    )
}

/// What a forger does after an edit, from the documentation alone: every carried digest
/// recomputed, every chain end and group's ranks re-recorded, and the run digest recomputed
/// over the attributes as they now stand.
pub fn reseal(dir: &Path, groups: u32) {
    let mut chains = Vec::new();
    for g in 0..groups {
        let file = format!("group-{g}.h5");
        let f = hdf5::File::open_rw(dir.join(&file)).unwrap();
        let ranks: u32 = f.attr(attr::ACCELERATORS).unwrap().read_scalar().unwrap();
        let version: u32 = f.attr(attr::SCHEMA_VERSION).unwrap().read_scalar().unwrap();
        let mut ends = vec![
            reseal_carried::<EpochRow>(&f, &file, "epochs"),
            end_of::<MonitorRow>(&f, &file, "monitor"),
            end_of::<TraceRow>(&f, &file, "trace"),
        ];
        if version >= 7 {
            ends.push(reseal_carried::<StepRow>(&f, &file, "steps"));
        }
        chains.push(GroupChain {
            group: g,
            ranks,
            chains: ends,
        });
    }
    let f = hdf5::File::open_rw(dir.join(PRIMARY_FILE)).unwrap();
    let ids: Vec<u64> = f.dataset("architecture_ids").unwrap().read_raw().unwrap();
    let json: Vec<VarLenUnicode> = f.dataset("architectures").unwrap().read_raw().unwrap();
    let archs: Vec<(u64, String)> = ids
        .into_iter()
        .zip(json.iter().map(|j| j.as_str().to_owned()))
        .collect();
    let seed = digest::chain_seed(PRIMARY_FILE, "architectures");
    let own = vec![
        reseal_carried::<TrialRow>(&f, PRIMARY_FILE, "trials"),
        ChainEnd::new(
            "architectures",
            archs.len() as u64,
            &digest::architecture_chain(seed, &archs),
        ),
        reseal_carried::<TpeRow>(&f, PRIMARY_FILE, "tpe"),
    ];
    write_text(
        &f,
        attr::GROUP_DIGESTS,
        &serde_json::to_string(&chains).unwrap(),
    );
    write_text(
        &f,
        attr::PRIMARY_DIGESTS,
        &serde_json::to_string(&own).unwrap(),
    );
    let version: u32 = f.attr("schema_version").unwrap().read_scalar().unwrap();
    let attrs: Vec<_> = aiperf_records::schema::primary_attrs(version)
        .map(|s| {
            let v = f.attr(s.name).ok().map(|a| match s.kind {
                AttrKind::U32 => AttrValue::U32(a.read_scalar().unwrap()),
                AttrKind::U64 => AttrValue::U64(a.read_scalar().unwrap()),
                AttrKind::F64 => AttrValue::F64(a.read_scalar().unwrap()),
                AttrKind::Text => AttrValue::Text(text_attr(&f, s.name).unwrap()),
            });
            (s.name, v)
        })
        .collect();
    write_text(
        &f,
        attr::RUN_DIGEST,
        &digest::hex(&digest::run_digest(&attrs)),
    );
}

/// Replaces text attribute `name` of `dir/primary.h5`.
pub fn set_text(dir: &Path, name: &str, value: &str) {
    let f = hdf5::File::open_rw(dir.join(PRIMARY_FILE)).unwrap();
    write_text(&f, name, value);
}

/// Replaces numeric attribute `name` of `dir/primary.h5`.
pub fn set_number<T: H5Type>(dir: &Path, name: &str, value: T) {
    let f = hdf5::File::open_rw(dir.join(PRIMARY_FILE)).unwrap();
    f.attr(name).unwrap().write_scalar(&value).unwrap();
}

/// Edits the rows of `T` in `dataset` of `dir/file`.
pub fn edit_rows<T: H5Type>(dir: &Path, file: &str, dataset: &str, edit: impl FnOnce(&mut Vec<T>)) {
    let f = hdf5::File::open_rw(dir.join(file)).unwrap();
    let mut rows: Vec<T> = f.dataset(dataset).unwrap().read_raw().unwrap();
    edit(&mut rows);
    rewrite(&f, dataset, &rows);
}
