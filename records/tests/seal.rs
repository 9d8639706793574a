//! Schema 3's seal, tested by enumeration: for every attribute, dataset and
//! field of the schema, an edit followed by a complete, correct reseal of every chain — what
//! a forger who read `results/README.md` can do — leaves records that verify as intact but
//! whose run digest is not the one the job logged, so `--digest` catches it. The lists come
//! from the schema's own tables and the row types' HDF5 descriptors, so a field added later
//! is enumerated too.

mod common;

use std::path::Path;

use aiperf_records::digest::Digest;
use aiperf_records::schema::{
    attr, AttrKind, EpochRow, MonitorRow, StepRow, TpeRow, TraceRow, TrialRow, Written,
    GROUP_ATTRS, GROUP_DATASETS, PRIMARY_ATTRS, PRIMARY_DATASETS, PRIMARY_FILE,
};
use aiperf_records::{integrity, read_run};
use common::reseal::{reseal, rewrite, text_attr, write_text};
use common::{official_run, serial};
use hdf5::types::{TypeDescriptor, VarLenUnicode};
use hdf5::H5Type;

/// The integrity verdict with the job log's digest `logged`.
fn verdict(dir: &Path, logged: &Digest) -> integrity::Integrity {
    integrity::check(&read_run(dir).unwrap(), Some(logged))
}

/// A fresh official run with a row in every dataset; returns its logged digest.
fn fixture(dir: &Path) -> Digest {
    official_run(dir, 3)
}

/// Asserts that the edited records are refused by the reader (a value that contradicts
/// another: returns false), or else that the reseal was complete (the records verify) and
/// `--digest` fails (returns true).
fn assert_caught(dir: &Path, logged: &Digest, what: &str) -> bool {
    let Ok(run) = read_run(dir) else {
        return false;
    };
    let v = integrity::check(&run, Some(logged));
    assert_eq!(v.digest_matches, Some(false), "{what}: {v:?}");
    let others: Vec<&String> = v
        .problems
        .iter()
        .filter(|p| !p.contains("--digest"))
        .collect();
    assert!(
        others.is_empty(),
        "{what}: the reseal was incomplete: {others:?}"
    );
    true
}

#[test]
fn the_fixture_verifies_and_matches_its_digest_and_has_a_row_in_every_dataset() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let logged = fixture(tmp.path());
    let v = verdict(tmp.path(), &logged);
    assert_eq!(
        (v.records, v.digest_matches),
        ("intact", Some(true)),
        "{v:?}"
    );
    // A reseal without an edit changes nothing: the test's forger is correct.
    reseal(tmp.path(), 1);
    let v = verdict(tmp.path(), &logged);
    assert_eq!(
        (v.records, v.digest_matches),
        ("intact", Some(true)),
        "{v:?}"
    );
    let run = read_run(tmp.path()).unwrap();
    assert!(!run.trials.is_empty() && !run.tpe.is_empty() && !run.architecture_rows.is_empty());
    let g = &run.groups[0];
    assert!(!g.epochs.is_empty() && !g.monitor.is_empty() && !g.trace.is_empty());
}

#[test]
fn every_sealed_attribute_edited_and_resealed_is_caught_by_the_digest() {
    let _serial = serial();
    let derived = [attr::GROUP_DIGESTS, attr::PRIMARY_DIGESTS];
    let mut by_digest = Vec::new();
    for spec in PRIMARY_ATTRS.iter().filter(|s| !derived.contains(&s.name)) {
        let tmp = tempfile::tempdir().unwrap();
        let logged = fixture(tmp.path());
        {
            let f = hdf5::File::open_rw(tmp.path().join(PRIMARY_FILE)).unwrap();
            let present = f.attr(spec.name).is_ok();
            assert_eq!(
                present,
                spec.written != Written::OnResume,
                "{}: the fixture holds every attribute a clean run writes",
                spec.name
            );
            match spec.kind {
                AttrKind::Text => {
                    let old = text_attr(&f, spec.name).unwrap_or_else(|| "[]".into());
                    write_text(&f, spec.name, &format!("{old} "));
                }
                AttrKind::U32 => {
                    let v: u32 = f.attr(spec.name).unwrap().read_scalar().unwrap();
                    f.attr(spec.name).unwrap().write_scalar(&(v + 1)).unwrap();
                }
                AttrKind::U64 => {
                    let v: u64 = f.attr(spec.name).unwrap().read_scalar().unwrap();
                    f.attr(spec.name).unwrap().write_scalar(&(v + 1)).unwrap();
                }
                AttrKind::F64 => {
                    let v: f64 = f.attr(spec.name).unwrap().read_scalar().unwrap();
                    f.attr(spec.name).unwrap().write_scalar(&(v + 1.0)).unwrap();
                }
            }
        }
        if spec.name != attr::SCHEMA_VERSION {
            reseal(tmp.path(), 1);
            if assert_caught(tmp.path(), &logged, spec.name) {
                by_digest.push(spec.name);
            }
        } else {
            // A schema the reader does not know is refused outright.
            assert!(read_run(tmp.path()).is_err());
        }
    }
    // Only the counts the reader checks against each other (world size, accelerators,
    // groups) are refused before the digest is asked: the rest is the seal's.
    assert!(by_digest.len() >= PRIMARY_ATTRS.len() - 6, "{by_digest:?}");
}

/// Flips the lowest bit of member `field` of row 0 of `T` rows in `dataset`.
fn flip<T: H5Type + Copy>(f: &hdf5::File, dataset: &str, field: &hdf5::types::CompoundField) {
    let mut rows: Vec<T> = f.dataset(dataset).unwrap().read_raw().unwrap();
    let offset = field.offset;
    // SAFETY: `offset` is a member of `T` per its own descriptor; every member is a number
    // whose bits may take any value but the enum, whose values 0 and 1 both exist.
    unsafe {
        let p = (&mut rows[0] as *mut T).cast::<u8>().add(offset);
        *p ^= 1;
    }
    rewrite(f, dataset, &rows);
}

fn fields<T: H5Type>() -> Vec<hdf5::types::CompoundField> {
    match T::type_descriptor() {
        TypeDescriptor::Compound(c) => c
            .fields
            .into_iter()
            .filter(|f| f.name != "digest")
            .collect(),
        other => panic!("{other} is not a compound"),
    }
}

/// Every member of every row type in `file`, edited in a fresh fixture and resealed.
fn each_member<T: H5Type + Copy>(file: &str, dataset: &str) -> usize {
    let members = fields::<T>();
    for field in &members {
        let tmp = tempfile::tempdir().unwrap();
        let logged = fixture(tmp.path());
        {
            let f = hdf5::File::open_rw(tmp.path().join(file)).unwrap();
            flip::<T>(&f, dataset, field);
        }
        reseal(tmp.path(), 1);
        let what = format!("{file} {dataset}.{}", field.name);
        // A changed bit of any member is a value the reader accepts: the seal must catch it.
        assert!(
            assert_caught(tmp.path(), &logged, &what),
            "{what}: refused by the reader"
        );
    }
    members.len()
}

#[test]
fn every_field_of_every_dataset_edited_and_resealed_is_caught_by_the_digest() {
    let _serial = serial();
    let mut covered = Vec::new();
    for &d in PRIMARY_DATASETS.iter().chain(GROUP_DATASETS) {
        let n = match d {
            "trials" => each_member::<TrialRow>(PRIMARY_FILE, d),
            "tpe" => each_member::<TpeRow>(PRIMARY_FILE, d),
            "epochs" => each_member::<EpochRow>("group-0.h5", d),
            "monitor" => each_member::<MonitorRow>("group-0.h5", d),
            "trace" => each_member::<TraceRow>("group-0.h5", d),
            "steps" => each_member::<StepRow>("group-0.h5", d),
            "architectures" => {
                for edit in 0..2 {
                    let tmp = tempfile::tempdir().unwrap();
                    let logged = fixture(tmp.path());
                    {
                        let f = hdf5::File::open_rw(tmp.path().join(PRIMARY_FILE)).unwrap();
                        if edit == 0 {
                            let mut ids: Vec<u64> =
                                f.dataset("architecture_ids").unwrap().read_raw().unwrap();
                            ids[0] += 7;
                            rewrite(&f, "architecture_ids", &ids);
                        } else {
                            let json: Vec<VarLenUnicode> =
                                f.dataset("architectures").unwrap().read_raw().unwrap();
                            let edited: Vec<VarLenUnicode> = json
                                .iter()
                                .map(|j| format!("{} ", j.as_str()).parse().unwrap())
                                .collect();
                            rewrite(&f, "architectures", &edited);
                        }
                    }
                    reseal(tmp.path(), 1);
                    let what = format!("architectures edit {edit}");
                    assert!(assert_caught(tmp.path(), &logged, &what), "{what}");
                }
                2
            }
            other => panic!("dataset {other} of the schema has no case in this test: add one"),
        };
        assert!(n > 0);
        covered.push(d);
    }
    assert_eq!(covered.len(), PRIMARY_DATASETS.len() + GROUP_DATASETS.len());
}

#[test]
fn every_group_attribute_edited_and_resealed_is_caught_or_refused() {
    let _serial = serial();
    for spec in GROUP_ATTRS {
        let tmp = tempfile::tempdir().unwrap();
        let logged = fixture(tmp.path());
        {
            let f = hdf5::File::open_rw(tmp.path().join("group-0.h5")).unwrap();
            let v: u32 = f.attr(spec.name).unwrap().read_scalar().unwrap();
            // The ranks halved (2 → 1, which the reader accepts), the schema version one
            // back (a version the reader knows, not the primary's); the others changed.
            let edited = if spec.name == attr::ACCELERATORS || spec.name == attr::SCHEMA_VERSION {
                v - 1
            } else {
                v ^ 1
            };
            f.attr(spec.name).unwrap().write_scalar(&edited).unwrap();
        }
        if spec.name == attr::ACCELERATORS {
            reseal(tmp.path(), 1);
            assert!(
                assert_caught(tmp.path(), &logged, spec.name),
                "2 → 1 ranks are read"
            );
        } else {
            // A schema version or group number that is not the file's own is refused.
            let e = read_run(tmp.path()).unwrap_err().to_string();
            assert!(e.contains("group-0.h5") && e.contains(spec.name), "{e}");
        }
    }
}

#[test]
fn an_attribute_outside_the_schema_is_altered_records_naming_it() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let logged = fixture(tmp.path());
    {
        let f = hdf5::File::open_rw(tmp.path().join("group-0.h5")).unwrap();
        write_text(&f, "note", "forged");
    }
    let v = verdict(tmp.path(), &logged);
    assert_eq!(v.records, "altered");
    assert!(
        v.problems
            .iter()
            .any(|p| p.contains("group-0.h5") && p.contains("\"note\"")),
        "{v:?}"
    );
}

/// The Python scorer written from results/README.md alone (`scripts/tools/verify_seal.py`) and
/// the forger's drill written likewise (`scripts/tools/tamper_drill.py`) agree with aiperf's own
/// reading: the documentation is enough to verify — and to reseal — the records, which is
/// why the consistency rules, not the seal, refuse a relabelled run.
#[test]
fn the_python_scorer_and_forger_written_from_the_readme_agree_with_aiperf() {
    let Some(python) = std::env::var_os("AIPERF_H5PY_PYTHON") else {
        common::missing_prerequisite(
            "AIPERF_H5PY_PYTHON (scripts/dev/setup-h5py-venv)",
            "python3-h5py",
        );
        return;
    };
    let _serial = serial();
    let scripts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/tools");
    let py = |args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new(&python)
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text.into_owned())
    };
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let logged = common::small_run(&run, 4);
    let hex = aiperf_records::digest::hex(&logged);
    let verify = scripts.join("verify_seal.py");
    let (code, text) = py(&[
        verify.as_os_str(),
        run.as_os_str(),
        "--digest".as_ref(),
        hex.as_ref(),
    ]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(&format!("run digest {hex}")) && text.ends_with("intact\n"),
        "{text}"
    );
    // The forger relabels the run as official and reseals it: both readers call the records
    // intact, the job log's digest does not match, and the consistency rules refuse it.
    let forged = tmp.path().join("forged");
    let (code, text) = py(&[
        scripts.join("tamper_drill.py").as_os_str(),
        run.as_os_str(),
        forged.as_os_str(),
    ]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = py(&[
        verify.as_os_str(),
        forged.as_os_str(),
        "--digest".as_ref(),
        hex.as_ref(),
    ]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("is not the one given with --digest"),
        "{text}"
    );
    let s = aiperf_records::score(&read_run(&forged).unwrap(), 360.0).unwrap();
    assert_eq!(s.integrity.records, "intact", "{:?}", s.integrity);
    assert_eq!(s.verdict.status, aiperf_records::score::Status::Invalid);
    let why = s.verdict.reasons.join("\n");
    assert!(
        why.contains(
            "takes 28×28×1 inputs with 10 classes, but the dataset has 224×224×3 and 1000"
        ) && why.contains("no recorded architecture is the configured start architecture resnet50")
            && why.contains("after the run's start"),
        "{why}"
    );
    // An edit without a reseal: the Python scorer names it too.
    common::reseal::edit_rows::<aiperf_records::schema::EpochRow>(
        &run,
        "group-0.h5",
        "epochs",
        |r| r[1].val_accuracy = 0.99,
    );
    let (code, text) = py(&[verify.as_os_str(), run.as_os_str()]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("group-0.h5 epochs row 1: its digest does not follow"),
        "{text}"
    );
}
