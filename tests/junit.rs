//! `results/junit.xml` lists every trial the name filter selected: those
//! that ran, with their verdict, and those ignored (by the config, or at run
//! time for not fitting the run's nodes) as skipped, with the reason. Trials
//! the filter left out are not in it.

mod support;

use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;
use support::{harness, only, setup};

const LIMIT: Duration = Duration::from_secs(480);

/// What `junit.xml` says: the suite's `tests` and `skipped` counts, and each
/// test case by name with its `<skipped>` message, if it has one.
struct Junit {
    tests: String,
    skipped: String,
    cases: BTreeMap<String, Option<String>>,
}

fn read_junit(path: &std::path::Path) -> Junit {
    use quick_xml::events::{BytesStart, Event};
    let xml = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let attr = |e: &BytesStart<'_>, key: &str| -> String {
        let found = e.attributes().flatten().find(|a| a.key.as_ref() == key);
        found.map(|a| a.normalized_value(quick_xml::XmlVersion::Implicit1_0).unwrap().into_owned()).unwrap_or_default()
    };
    let mut junit = Junit { tests: String::new(), skipped: String::new(), cases: BTreeMap::new() };
    let mut reader = quick_xml::Reader::from_str(&xml);
    let mut case = String::new();
    loop {
        match reader.read_event().unwrap() {
            Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                "testsuite" => (junit.tests, junit.skipped) = (attr(&e, "tests"), attr(&e, "skipped")),
                "testcase" => {
                    case = attr(&e, "name");
                    junit.cases.insert(case.clone(), None);
                }
                "skipped" => {
                    junit.cases.insert(case.clone(), Some(attr(&e, "message")));
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    junit
}

#[test]
fn ignored_trials_are_listed_as_skipped_with_their_reasons() {
    let s = setup(|v| {
        let variants = json!([
            {"name": "ring", "env": {"CCL_ALGO": "ring"}},
            {"name": "mpi", "launcher": "mpi", "ranks": 3},
            {"name": "smallchunks", "env": {"CCL_ALGO": "ring", "CCL_CHUNK_BYTES": "1024"}, "ignore": true}
        ]);
        only(v, "AllReduce", &["1K"], variants);
        // Too few slots for the 3-rank trial: it is ignored when it would start.
        v["hosts"] = json!([{"name": "elsewhere", "slots": 2}]);
    });
    let run = harness(&s, "collectives", &[], LIMIT);
    assert!(run.success, "{}", run.text());
    let junit = read_junit(&s.ws.join("results/junit.xml"));
    assert_eq!((junit.tests.as_str(), junit.skipped.as_str()), ("3", "2"), "{:?}", junit.cases);
    assert_eq!(junit.cases["AllReduce::1K::ring"], None);
    assert_eq!(
        junit.cases["AllReduce::1K::smallchunks"].as_deref(),
        Some("the config marks variant smallchunks \"ignore\": true (run it with --include-ignored)")
    );
    let misfit = junit.cases["AllReduce::1K::mpi"].as_deref().unwrap_or_default();
    assert!(misfit.starts_with("needs 3 ranks on 1 node(s) but the config's hosts"), "{misfit}");

    // A trial the name filter leaves out is not ignored: it is not listed.
    let one = harness(&s, "collectives", &["AllReduce::1K::ring"], LIMIT);
    assert!(one.success, "{}", one.text());
    let junit = read_junit(&s.ws.join("results/junit.xml"));
    assert_eq!((junit.tests.as_str(), junit.skipped.as_str()), ("1", "0"), "{:?}", junit.cases);
}
