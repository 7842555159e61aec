//! The house plan is checked: `docs/architecture.md`'s stage table against the
//! `crate::` imports of `src/`. A module may import its own stage and those
//! above it in the table; an import that points further down the table, a
//! source file that no row names, and a row that names no file all fail.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const TABLE_MARKER: &str = "<!-- layering:";

/// One row of the stage table: its name and the paths it names (`exec/` for a
/// folder, `plan.rs` for a file), relative to `src/`.
#[derive(Debug)]
struct Stage {
    name: String,
    paths: Vec<String>,
}

fn stages(doc: &str) -> Vec<Stage> {
    let at = doc.find(TABLE_MARKER).expect("docs/architecture.md has no `<!-- layering:` table");
    let mut rows = Vec::new();
    for line in doc[at..].lines().skip(1) {
        let line = line.trim();
        if !line.starts_with('|') {
            if rows.is_empty() {
                continue;
            }
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() < 2 || cells[0] == "stage" || cells[0].starts_with("---") {
            continue;
        }
        let paths = cells[1].split('`').skip(1).step_by(2).map(str::to_string).collect();
        rows.push(Stage { name: cells[0].to_string(), paths });
    }
    rows
}

/// The stage index of a path relative to `src/` (`exec/process.rs`).
fn stage_of(stages: &[Stage], rel: &str) -> Option<usize> {
    stages
        .iter()
        .position(|s| s.paths.iter().any(|p| if p.ends_with('/') { rel.starts_with(p.as_str()) } else { rel == p }))
}

/// The stage of a top-level module name (`exec`, `plan`, `bail`).
fn stage_of_module(stages: &[Stage], module: &str) -> Option<usize> {
    // `bail!` is exported at the crate root by `error.rs`.
    let module = if module == "bail" { "error" } else { module };
    stage_of(stages, &format!("{module}.rs")).or_else(|| stage_of(stages, &format!("{module}/mod.rs")))
}

/// Source without comments and without the unit-test module that closes a file.
fn non_test_code(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod tests").or_else(|| text.find("#[cfg(test)]\npub(crate) mod tests")) {
        Some(at) => &text[..at],
        None => text,
    };
    body.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The top-level modules named by every `crate::` path in `code`, braces
/// included: `use crate::{exec::host, workspace::Area}` names `exec` and
/// `workspace`.
fn imported_modules(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        // `$crate::` is a macro's own path, not an import.
        let is_macro = rest[..at].ends_with('$');
        rest = &rest[at + "crate::".len()..];
        if is_macro {
            continue;
        }
        if let Some(inner) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item = String::new();
            for ch in inner.chars() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.extend(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    item.push(ch);
                }
            }
            found.extend(first_segment(&item));
        } else {
            found.extend(first_segment(rest));
        }
    }
    found
}

fn first_segment(text: &str) -> Option<String> {
    let name: String = text.trim_start().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    (!name.is_empty() && name != "self").then_some(name)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every import that points down the table, as `file -> module (stage)`.
fn violations(stages: &[Stage], src: &Path) -> (Vec<String>, BTreeSet<usize>) {
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap().to_string_lossy().into_owned();
        // A unit-test module of its own file (`upstream/tests.rs`) is a test.
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let Some(own) = stage_of(stages, &rel) else {
            problems.push(format!("src/{rel}: no row of docs/architecture.md's stage table names it"));
            continue;
        };
        used.insert(own);
        let code = non_test_code(&std::fs::read_to_string(&file).unwrap());
        for module in imported_modules(&code) {
            match stage_of_module(stages, &module) {
                Some(theirs) if theirs > own => problems.push(format!(
                    "src/{rel} (stage {}) imports crate::{module} (stage {}, further down the table)",
                    stages[own].name, stages[theirs].name
                )),
                Some(_) => {}
                None => {
                    problems.push(format!("src/{rel} imports crate::{module}, which no row of the stage table names"));
                }
            }
        }
    }
    (problems, used)
}

#[test]
fn no_module_imports_a_later_stage() {
    let doc = std::fs::read_to_string(Path::new(ROOT).join("docs/architecture.md")).unwrap();
    let stages = stages(&doc);
    assert!(stages.len() > 10, "the stage table was not found or is cut short: {stages:?}");
    let (problems, used) = violations(&stages, &Path::new(ROOT).join("src"));
    let unused: Vec<&str> =
        stages.iter().enumerate().filter(|(i, _)| !used.contains(i)).map(|(_, s)| s.name.as_str()).collect();
    assert!(unused.is_empty(), "rows of the stage table that name no file of src/: {unused:?}");
    assert!(problems.is_empty(), "the code does not follow docs/architecture.md:\n{}", problems.join("\n"));
}

#[test]
fn an_import_down_the_table_is_caught() {
    let stages = stages(
        "<!-- layering: -->\n| stage | path | owns |\n|---|---|---|\n| low | `low/` | x |\n| high | `high.rs` | y |\n\nafter\n",
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("low")).unwrap();
    std::fs::write(dir.path().join("high.rs"), "use crate::low::thing;\n").unwrap();
    std::fs::write(
        dir.path().join("low/mod.rs"),
        "//! crate::high in a comment is no import\nuse crate::{low::a, high::{b, c}};\n#[cfg(test)]\nmod tests { use crate::high; }\n",
    )
    .unwrap();
    let (problems, _) = violations(&stages, dir.path());
    assert_eq!(problems, ["src/low/mod.rs (stage low) imports crate::high (stage high, further down the table)"]);
}

#[test]
fn brace_lists_name_each_module() {
    let found = imported_modules(
        "use crate::{exec::{host, process::Cmd}, workspace::Area, self};\nlet x = $crate::error::Error;",
    );
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["exec", "workspace"]);
}

/// Each GPU vendor's words: its backend's name and the tools, formats and
/// targets only it has. Matched whole (letters, digits and `_` around them
/// end a word), in any case, in code and strings; comments and tests left out.
const VENDORS: [(&str, &[&str]); 2] = [
    (
        "nvidia",
        &["nvidia", "cuda", "cupti", "nvcc", "sass", "cubin", "cubins", "ptx", "cuobjdump", "nvdisasm", "nvptx64"],
    ),
    ("amdgpu", &["amdgpu", "amd", "hip", "rocm", "gfx", "amdgcn", "hipcc"]),
];

/// The one place outside a vendor's folder that names every vendor: the list of backends.
const REGISTRY: &str = "device/registry.rs";

/// Words of a vendor that other files may say, and why: they speak for a
/// library's own platform or for every toolkit at once, not for a backend.
const SPOKEN_FOR: [(&str, &str, &str); 2] = [
    // RCCL's test runner puts `<rocm>/lib` on every test's library path (upstream's order).
    ("launch/mod.rs", "rocm", "RCCL's runner"),
    // The report's default ignore rule leaves every toolkit's system files out.
    ("config/types.rs", "rocm", "default ignore rule"),
];

/// `word`'s whole-word occurrences in `code`, in any case.
fn names_word(code: &str, word: &str) -> bool {
    let lower = code.to_ascii_lowercase();
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    lower.match_indices(word).any(|(at, _)| {
        let before = lower[..at].chars().next_back();
        let after = lower[at + word.len()..].chars().next();
        !before.is_some_and(is_word) && !after.is_some_and(is_word)
    })
}

/// Every place whose code (tests left out) names a vendor outside that
/// vendor's own folder, `device/<vendor>/`.
fn vendor_leaks(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    let mut leaks = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap().to_string_lossy().into_owned();
        if rel == REGISTRY || rel.ends_with("tests.rs") || rel.ends_with("test_backend.rs") {
            continue;
        }
        // A vendor's folder is declared in `device/mod.rs`: a `mod` line names it and nothing else.
        let code = non_test_code(&std::fs::read_to_string(&file).unwrap())
            .lines()
            .filter(|l| {
                !(l.trim_start().starts_with("pub mod ") || l.trim_start().starts_with("mod ")) || !l.ends_with(';')
            })
            .collect::<Vec<_>>()
            .join("\n");
        for (vendor, words) in VENDORS {
            if rel.starts_with(&format!("device/{vendor}/")) {
                continue;
            }
            let spoken_for = |word: &&str| SPOKEN_FOR.iter().any(|&(file, w, _)| file == rel && w == *word);
            for word in words.iter().filter(|word| names_word(&code, word) && !spoken_for(word)) {
                leaks.push(format!("src/{rel} names {word} ({vendor})"));
            }
        }
    }
    leaks
}

/// A backend is one folder under `device/` and one line in its registry: the
/// other stages, and the device stage's own front, ask vendor-neutral questions
/// (docs/architecture.md, "Adding a device backend").
#[test]
fn no_file_but_a_vendor_s_own_folder_names_the_vendor() {
    let leaks = vendor_leaks(&Path::new(ROOT).join("src"));
    assert!(leaks.is_empty(), "vendors named outside their folders:\n{}", leaks.join("\n"));
}

#[test]
fn a_vendor_named_outside_its_folder_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    for folder in ["device/nvidia", "device/amdgpu", "report"] {
        std::fs::create_dir_all(dir.path().join(folder)).unwrap();
    }
    std::fs::write(dir.path().join("device/nvidia/mod.rs"), "let cupti = \"libcupti.so\"; let hip = 1;\n").unwrap();
    std::fs::write(dir.path().join("device/registry.rs"), "&nvidia::Nvidia, &amdgpu::Amdgpu\n").unwrap();
    std::fs::write(
        dir.path().join("report/mod.rs"),
        "// NVIDIA in a comment\nlet shipped = \"CUPTI dropped\"; let cudaless = 1;\n#[cfg(test)]\nmod tests { rocm }\n",
    )
    .unwrap();
    assert_eq!(
        vendor_leaks(dir.path()),
        ["src/device/nvidia/mod.rs names hip (amdgpu)", "src/report/mod.rs names cupti (nvidia)"]
    );
}
