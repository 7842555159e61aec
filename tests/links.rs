//! Every Markdown link of README.md and docs/*.md leads somewhere: a
//! relative target file exists, and an `#anchor` (in the same file or
//! another `.md`) is the GitHub slug of one of its headings. Web links are
//! not fetched (this runs without a network); they are listed as skipped.
//! And every code span of those files and of the project's Rust comments that
//! names a Rust file (`supervisor.rs`, `src/exec/supervisor.rs`) or a path of
//! this crate's items (`device::nvidia::sass::line_coverage`, `Type::method` of a
//! type of this crate) names one that exists.

use regex::Regex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// GitHub's anchor for a heading: lowercase, spaces to `-`, every other
/// character but letters, digits, `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// The text outside fenced code blocks, which hold no headings.
fn unfenced(text: &str) -> String {
    let mut out = String::new();
    let mut fence: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let marker: String = trimmed.chars().take_while(|&c| c == '`' || c == '~').collect();
        match &fence {
            Some(open) if marker.len() >= open.len() && marker.starts_with(&open[..1]) => fence = None,
            Some(_) => {}
            None if marker.len() >= 3 => fence = Some(marker),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// The text outside fenced code blocks, with inline code spans blanked:
/// neither holds links.
fn prose(text: &str) -> String {
    let out = unfenced(text);
    // A code span opens with a run of backticks and closes with a run as long.
    let spans = Regex::new(r"(?s)(`+)").unwrap();
    let mut blanked = String::new();
    let mut rest = out.as_str();
    while let Some(open) = spans.find(rest) {
        let after = &rest[open.end()..];
        let close = spans.find_iter(after).find(|m| m.len() == open.len());
        let Some(close) = close else { break };
        blanked.push_str(&rest[..open.start()]);
        let span = &rest[open.start()..open.end() + close.end()];
        blanked.extend(span.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
        rest = &after[close.end()..];
    }
    blanked.push_str(rest);
    blanked
}

/// The anchors of a Markdown file's headings, a repeated one numbered as
/// GitHub numbers it (`name`, `name-1`, …).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in unfenced(text).lines() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        let Some(heading) = line.get(hashes..).filter(|h| (1..=6).contains(&hashes) && h.starts_with(' ')) else {
            continue;
        };
        let base = slug(heading.trim().trim_end_matches('#').trim());
        let mut anchor = base.clone();
        let mut n = 0;
        while !found.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
    }
    found
}

/// Every inline link's and image's target, with the line it is on.
fn links(text: &str) -> Vec<(usize, String)> {
    let link = Regex::new(r#"!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)"#).unwrap();
    let text = prose(text);
    link.captures_iter(&text)
        .map(|c| {
            let at = c.get(0).unwrap().start();
            (text[..at].matches('\n').count() + 1, c[1].to_string())
        })
        .collect()
}

/// What is wrong with each link of `file`, and the web links not fetched.
fn check(file: &Path) -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let shown = file.strip_prefix(ROOT).unwrap_or(file).display().to_string();
    let (mut broken, mut web) = (Vec::new(), Vec::new());
    for (line, target) in links(&text) {
        let at = format!("{shown}:{line}: ({target})");
        if ["http://", "https://", "mailto:"].iter().any(|s| target.starts_with(s)) {
            web.push(at);
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let dest = if path.is_empty() { file.to_path_buf() } else { file.parent().unwrap().join(path) };
        if path.is_empty() && anchor.is_none() || !dest.exists() {
            broken.push(format!("{at}: no such file {}", dest.display()));
            continue;
        }
        let Some(anchor) = anchor.filter(|_| dest.extension().is_some_and(|e| e == "md")) else { continue };
        let known = anchors(&std::fs::read_to_string(&dest).unwrap());
        if !known.contains(anchor) {
            broken.push(format!("{at}: no heading of {} has the anchor #{anchor}", dest.display()));
        }
    }
    (broken, web)
}

fn documents() -> Vec<PathBuf> {
    let mut files = vec![Path::new(ROOT).join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

#[test]
fn every_link_of_the_readme_and_docs_leads_somewhere() {
    let (mut broken, mut web) = (Vec::new(), Vec::new());
    let mut count = 0;
    for file in documents() {
        count += links(&std::fs::read_to_string(&file).unwrap()).len();
        let (b, w) = check(&file);
        broken.extend(b);
        web.extend(w);
    }
    eprintln!("{count} links checked; {} web links not fetched:\n{}", web.len(), web.join("\n"));
    assert!(count > 0, "no link was found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn slugs_are_github_s() {
    assert_eq!(slug("What happens when…"), "what-happens-when");
    assert_eq!(slug("A new config's first report"), "a-new-configs-first-report");
    assert_eq!(slug("Quick start: the command line"), "quick-start-the-command-line");
    assert_eq!(slug("Using your RCCL test_runner config"), "using-your-rccl-test_runner-config");
    assert_eq!(slug("Device profile names (LLVM 23.1's compiler-rt)"), "device-profile-names-llvm-231s-compiler-rt");
    assert_eq!(slug("`cargo coverage` and a filter"), "cargo-coverage-and-a-filter");
}

#[test]
fn links_and_headings_in_code_are_not_read() {
    let text = "# Title\n\nSee [a](a.md#x) and `[b](b.md)`.\n\n```\n# not a heading\n[c](c.md)\n```\n\n## Title\n\n### `Code` in it\n\
                [d\nwrapped](d.md \"title\") ![e](<e.png>)\n";
    let targets: Vec<(usize, String)> = links(text);
    assert_eq!(targets, [(3, "a.md#x".to_string()), (13, "d.md".to_string()), (14, "e.png".to_string())]);
    let expected = ["code-in-it", "title", "title-1"].map(String::from);
    assert_eq!(anchors(text), BTreeSet::from(expected));
}

#[test]
fn a_broken_link_or_anchor_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("other.md"), "# Other\n\n## Part two\n").unwrap();
    let file = dir.path().join("doc.md");
    std::fs::write(
        &file,
        "# Doc\n\n[ok](other.md#part-two) [ok](#doc) [web](https://example.com)\n\
         [gone](missing.md) [bad](other.md#part-three) [bad](#nothing)\n",
    )
    .unwrap();
    let (broken, web) = check(&file);
    assert_eq!(web.len(), 1, "{web:?}");
    assert_eq!(broken.len(), 3, "{broken:?}");
    assert!(broken[0].contains("(missing.md): no such file"), "{broken:?}");
    assert!(broken[1].contains("(other.md#part-three): no heading of"), "{broken:?}");
    assert!(broken[2].contains("(#nothing): no heading of"), "{broken:?}");
}

/// Every Rust file of the project, by path relative to the root (`target/` and the fixtures'
/// copies of other projects left out).
fn rust_files() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack: Vec<PathBuf> =
        ["src", "tests", "benches", "examples"].iter().map(|d| Path::new(ROOT).join(d)).collect();
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path.strip_prefix(ROOT).unwrap().to_path_buf());
            }
        }
    }
    found.sort();
    found
}

/// The code spans of a Markdown file's prose, and of a Rust file's comments, with their lines.
fn code_spans(file: &Path, text: &str) -> Vec<(usize, String)> {
    static SPAN: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"`([^`\n]+)`").unwrap());
    let span = &*SPAN;
    let rust = file.extension().is_some_and(|e| e == "rs");
    let mut spans = Vec::new();
    let source = if rust { text.to_string() } else { unfenced(text) };
    for (n, line) in source.lines().enumerate() {
        let line = if rust {
            match line.trim_start().strip_prefix("//") {
                Some(comment) => comment,
                None => continue,
            }
        } else {
            line
        };
        spans.extend(span.captures_iter(line).map(|c| (n + 1, c[1].to_string())));
    }
    spans
}

/// The module files a path's leading segments may name, with how many segments each took: a
/// module of `src/` from the top (`crate`, `device::nvidia::sass`), a module named so anywhere in
/// `src/` (`attribution::TrialCoverage`), or a test or bench file (`fault_matrix::sigint_…`).
fn module_files(path: &[&str], files: &[PathBuf]) -> Vec<(PathBuf, usize)> {
    let root = Path::new(ROOT);
    let walk = |mut file: PathBuf, mut used: usize| {
        for segment in &path[used..] {
            let dir = if file.ends_with("mod.rs") || file.ends_with("lib.rs") {
                file.parent().unwrap().to_path_buf()
            } else {
                file.with_extension("")
            };
            match [dir.join(format!("{segment}.rs")), dir.join(segment).join("mod.rs")]
                .into_iter()
                .find(|p| p.is_file())
            {
                Some(next) => {
                    file = next;
                    used += 1;
                }
                None => break,
            }
        }
        (file, used)
    };
    if path[0] == "crate" {
        return vec![walk(root.join("src/lib.rs"), 1)];
    }
    let first = path[0];
    let named = |f: &&PathBuf| {
        f.file_name().is_some_and(|n| n == format!("{first}.rs").as_str()) || f.ends_with(format!("{first}/mod.rs"))
    };
    files.iter().filter(named).map(|f| walk(root.join(f), 1)).collect()
}

/// The text of `src/` and the names it defines.
struct Sources {
    text: String,
    defined: BTreeSet<String>,
}

impl Sources {
    fn of(files: &[PathBuf]) -> Sources {
        let text: String = files
            .iter()
            .filter(|f| f.starts_with("src"))
            .map(|f| std::fs::read_to_string(Path::new(ROOT).join(f)).unwrap())
            .collect();
        let defined = definitions(&text);
        Sources { text, defined }
    }
}

/// The names a Rust text defines: items, and the variants, fields and tests it lists.
fn definitions(text: &str) -> BTreeSet<String> {
    static ITEM: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\b(?:fn|struct|enum|mod|const|static|type|trait|macro_rules!|union)\s+(\w+)").unwrap()
    });
    static MEMBER: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?m)^\s*(?:pub(?:\([a-z]+\))?\s+)?(\w+)\s*[,({:=]").unwrap());
    ITEM.captures_iter(text).chain(MEMBER.captures_iter(text)).map(|c| c[1].to_string()).collect()
}

/// [`definitions`] of one file, read once.
fn definitions_of(file: &Path) -> BTreeSet<String> {
    static SEEN: LazyLock<std::sync::Mutex<std::collections::HashMap<PathBuf, BTreeSet<String>>>> =
        LazyLock::new(Default::default);
    let mut seen = SEEN.lock().unwrap();
    seen.entry(file.to_path_buf()).or_insert_with(|| definitions(&std::fs::read_to_string(file).unwrap())).clone()
}

/// Whether `name` (a prefix, when it ends with `…`) is among `defined`.
fn defines(defined: &BTreeSet<String>, name: &str) -> bool {
    match name.strip_suffix('…') {
        Some(start) => defined.range(start.to_string()..).next().is_some_and(|d| d.starts_with(start)),
        None => defined.contains(name),
    }
}

/// Why a code span that names a Rust file or a path of this crate's items does not lead to
/// one; `None` when it does, or when it names something else (a command, another project's
/// item: `CoverageMapping::load` is LLVM's).
fn dangling(span: &str, files: &[PathBuf], sources: &Sources) -> Option<String> {
    static ITEM_PATH: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[A-Za-z_]\w*(::[A-Za-z_]\w*…?)+$").unwrap());
    let span = span.trim();
    if let Some(path) = span.strip_suffix(".rs").or_else(|| span.rsplit_once(".rs:").map(|(p, _)| p)) {
        if path.contains(['*', ' ', '<', '{']) || path.starts_with("http") {
            return None;
        }
        let file = format!("{path}.rs");
        // A path with folders may be the root's, or a stage's (`mapping/indexed.rs` in the
        // coverage row): some file ends with it.
        let exists = if file.contains('/') {
            Path::new(ROOT).join(&file).is_file() || files.iter().any(|f| f.ends_with(&file))
        } else {
            files.iter().any(|f| f.file_name().is_some_and(|n| n == file.as_str()))
        };
        return (!exists).then(|| format!("no file {file}"));
    }
    if !ITEM_PATH.is_match(span) {
        return None;
    }
    let segments: Vec<&str> = span.split("::").collect();
    if segments[0].starts_with(char::is_uppercase) {
        // `Type::item` of a type of this crate: the item is defined somewhere in it.
        if !defines(&sources.defined, segments[0]) {
            return None;
        }
        let missing: Vec<&&str> = segments[1..].iter().filter(|s| !defines(&sources.defined, s)).collect();
        return (!missing.is_empty()).then(|| format!("{missing:?} defined nowhere in src/"));
    }
    // A libtest name of the report or the suite (`report::merge`) is a string of the harness.
    if sources.text.contains(&format!("\"{span}\"")) {
        return None;
    }
    // The segments after the last module: an item of that file, then items of the crate
    // (a method, a variant). One module that holds them is enough.
    let problem = |(file, used): &(PathBuf, usize)| -> Option<String> {
        let defined = definitions_of(file);
        let shown = file.strip_prefix(ROOT).unwrap().display().to_string();
        let (first, rest) = segments[*used..].split_first()?;
        if !defines(&defined, first) {
            return Some(format!("{shown} defines no {first}"));
        }
        let missing: Vec<&&str> = rest.iter().filter(|s| !defines(&sources.defined, s)).collect();
        (!missing.is_empty()).then(|| format!("{missing:?} defined nowhere in src/"))
    };
    let candidates = module_files(&segments, files);
    let problems: Vec<String> = candidates.iter().map(problem).collect::<Option<Vec<_>>>()?;
    problems.into_iter().next()
}

#[test]
fn every_rust_file_and_item_path_the_docs_and_comments_name_exists() {
    let files = rust_files();
    let sources = Sources::of(&files);
    let mut texts: Vec<PathBuf> = documents();
    texts.extend(files.iter().map(|f| Path::new(ROOT).join(f)));
    let (mut checked, mut wrong) = (0, Vec::new());
    for file in &texts {
        let text = std::fs::read_to_string(file).unwrap();
        for (line, span) in code_spans(file, &text) {
            checked += 1;
            if let Some(why) = dangling(&span, &files, &sources) {
                wrong.push(format!("{}:{line}: `{span}`: {why}", file.strip_prefix(ROOT).unwrap().display()));
            }
        }
    }
    assert!(checked > 1000, "only {checked} code spans were found");
    assert!(wrong.is_empty(), "{} code spans name what does not exist:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn a_rust_file_or_item_path_that_does_not_exist_is_named() {
    let files = rust_files();
    let sources = Sources::of(&files);
    let wrong = |span: &str| dangling(span, &files, &sources);
    for fine in [
        "src/exec/supervisor.rs",
        "supervisor.rs:17",
        "tests/links.rs",
        "device::nvidia::sass::line_coverage",
        "crate::coverage::lcov::fold_in",
        "attribution::TrialCoverage",
        "fault_matrix::sigint_…",
        "report::merge",
        "FileCoverage::tallies",
        "CoverageMapping::load",
        "std::sort",
        "cargo test",
    ] {
        assert_eq!(wrong(fine), None, "{fine}");
    }
    assert_eq!(wrong("toolchain.rs").as_deref(), Some("no file toolchain.rs"));
    assert_eq!(wrong("src/exec/run.rs").as_deref(), Some("no file src/exec/run.rs"));
    assert_eq!(
        wrong("device::nvidia::sass::no_such_fn").as_deref(),
        Some("src/device/nvidia/sass/mod.rs defines no no_such_fn")
    );
    assert_eq!(wrong("fault_matrix::no_such_test…").as_deref(), Some("tests/fault_matrix.rs defines no no_such_test…"));
    assert!(wrong("FileCoverage::no_such_method").is_some_and(|w| w.contains("no_such_method")));
}
