//! results/README.md is the contract another scorer is written from: its
//! compound layouts (members, order, offsets) and its table of sealed attributes (names,
//! order) must be the schema's own, so this test reads them back from the page.

use aiperf_records::schema::{EpochRow, TpeRow, TrialRow, PRIMARY_ATTRS};
use hdf5::types::TypeDescriptor;
use hdf5::H5Type;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../results/README.md")).unwrap()
}

/// The rows of the markdown table that follows the line starting with `heading`:
/// (first cell without backticks, second cell).
fn table_after(text: &str, heading: &str) -> Vec<(String, String)> {
    let start = text
        .lines()
        .position(|l| l.starts_with(heading))
        .unwrap_or_else(|| panic!("{heading:?} not in results/README.md"));
    text.lines()
        .skip(start + 1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_string(), cells[2].to_string())
        })
        .collect()
}

fn members<T: H5Type>() -> (usize, Vec<(String, String)>) {
    let TypeDescriptor::Compound(c) = T::type_descriptor() else {
        panic!("not a compound")
    };
    let mut f = c.fields.clone();
    f.sort_by_key(|f| f.offset);
    (
        c.size,
        f.into_iter()
            .map(|f| (f.name, f.offset.to_string()))
            .collect(),
    )
}

#[test]
fn the_documented_compound_layouts_are_the_schemas() {
    let text = readme();
    for (heading, (size, want)) in [
        ("`trials` —", members::<TrialRow>()),
        ("`tpe` —", members::<TpeRow>()),
        ("`epochs` — 160", members::<EpochRow>()),
    ] {
        assert_eq!(table_after(&text, heading), want, "{heading}");
        assert!(
            text.lines()
                .any(|l| l.starts_with(heading) && l.contains(&format!("{size} bytes per row"))),
            "{heading}: {size} bytes per row"
        );
    }
    let (size, _) = members::<aiperf_records::audit::AuditRow>();
    assert!(text.contains(&format!(
        "`epochs` — {size} bytes per row, one per compared epoch"
    )));
    let (size, _) = members::<aiperf_records::audit::SeedRow>();
    assert!(text.contains(&format!("`seeds` — {size} bytes per row")));
}

#[test]
fn the_documented_attributes_are_the_sealed_ones_in_their_order() {
    let text = readme();
    let documented: Vec<String> = table_after(&text, "Attributes (scalars), **in the order")
        .into_iter()
        .map(|(name, _)| name)
        .filter(|n| n != "run_digest")
        .collect();
    let sealed: Vec<&str> = PRIMARY_ATTRS.iter().map(|s| s.name).collect();
    assert_eq!(documented, sealed);
}

#[test]
fn the_trial_status_enum_members_are_as_documented() {
    let TypeDescriptor::Compound(c) = TrialRow::type_descriptor() else {
        panic!()
    };
    let status = c.fields.iter().find(|f| f.name == "status").unwrap();
    let TypeDescriptor::Enum(e) = &status.ty else {
        panic!("status is not an enum")
    };
    let names: Vec<(String, u64)> = e
        .members
        .iter()
        .map(|m| (m.name.clone(), m.value))
        .collect();
    assert_eq!(
        names,
        [
            ("Finished".to_string(), 0),
            ("Stopped".into(), 1),
            ("Failed".into(), 2)
        ]
    );
    assert!(readme().contains("members `Finished` = 0 (budget or early stop), `Stopped` = 1"));
}
