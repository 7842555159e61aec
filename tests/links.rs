//! Every Markdown link of README.md and docs/*.md leads somewhere: a
//! relative target file exists, and an `#anchor` (in the same file or
//! another `.md`) is the GitHub slug of one of its headings. Web links are
//! not fetched (this runs without a network); they are listed as skipped.

use regex::Regex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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
