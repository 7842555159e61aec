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
    // `bail!` is exported at the crate root by `error.rs`, the reporter's macros by `reporter.rs`.
    let module = match module {
        "bail" => "error",
        "say" | "note" | "warning" | "detail" | "show" | "output" => "reporter",
        other => other,
    };
    stage_of(stages, &format!("{module}.rs")).or_else(|| stage_of(stages, &format!("{module}/mod.rs")))
}

/// Source without comments, strings or the unit-test module that closes a
/// file: the code whose paths are imports.
fn non_test_code(text: &str) -> String {
    scan(test_module_cut(text), Strings::Blank)
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

/// The one place outside a vendor's folder that names every vendor: the list of backends.
const REGISTRY: &str = "device/registry.rs";

/// The one file where a `mod <vendor>;` line declares a vendor's folder.
const DEVICE_FRONT: &str = "device/mod.rs";

/// Where a backend folder declares the words only it may say.
const WORDS_FILE: &str = "vendor-words.txt";

/// A backend's words: the folder's name, the words its `vendor-words.txt`
/// declares, the target prefixes its `target_forms` gives (`sm_`, `gfx`),
/// and the files outside the folder that may say one of its words, and why.
#[derive(Debug)]
struct Vendor {
    name: String,
    words: BTreeSet<String>,
    targets: Vec<String>,
    spoken_for: Vec<(String, String)>,
}

/// Every folder of `device/` is a backend, and each declares its words next
/// to its code: a new backend is policed without an edit to this test.
fn vendors(src: &Path) -> Result<Vec<Vendor>, String> {
    let mut found = Vec::new();
    let mut folders: Vec<PathBuf> = std::fs::read_dir(src.join("device"))
        .map_err(|e| format!("src/device: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    for folder in folders {
        let name = folder.file_name().unwrap().to_string_lossy().into_owned();
        let declared = std::fs::read_to_string(folder.join(WORDS_FILE))
            .map_err(|e| format!("src/device/{name}/{WORDS_FILE}: every backend folder declares its words ({e})"))?;
        let mut vendor =
            Vendor { words: BTreeSet::from([name.clone()]), name, targets: Vec::new(), spoken_for: Vec::new() };
        for line in declared.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                ["spoken-for", file, word, ..] => vendor.spoken_for.push((file.to_string(), word.to_string())),
                words if !words.contains(&"spoken-for") => {
                    for word in words {
                        let parts = split_words(word);
                        if parts.len() != 1 {
                            return Err(format!(
                                "src/device/{}/{WORDS_FILE}: {word:?} is not one word ({parts:?})",
                                vendor.name
                            ));
                        }
                        vendor.words.extend(parts);
                    }
                }
                _ => {
                    return Err(format!(
                        "src/device/{}/{WORDS_FILE}: `{line}`: expected `spoken-for <file> <word>`",
                        vendor.name
                    ));
                }
            }
        }
        let front = std::fs::read_to_string(folder.join("mod.rs")).unwrap_or_default();
        vendor.targets = target_prefixes(&front)
            .ok_or_else(|| format!("src/device/{}/mod.rs: no `fn target_forms` with its patterns", vendor.name))?;
        found.push(vendor);
    }
    Ok(found)
}

/// The prefixes of the patterns a backend's `target_forms` returns:
/// `"sm_*/compute_* (NVIDIA)"` gives `sm_` and `compute_`.
fn target_prefixes(front: &str) -> Option<Vec<String>> {
    let after = &front[front.find("fn target_forms")?..];
    let literal = after[after.find('"')? + 1..].split('"').next()?;
    let prefixes: Vec<String> = literal
        .split(|c: char| c.is_whitespace() || c == '/' || c == ',')
        .filter_map(|form| form.strip_suffix('*'))
        .filter(|p| !p.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    (!prefixes.is_empty()).then_some(prefixes)
}

/// `text` with its comments blanked out and its strings kept whole: a `//`
/// inside a string (`"https://…"`) is not a comment. Escapes in strings
/// become spaces, so `"\ncuda"` says `cuda`.
fn without_comments(text: &str) -> String {
    scan(text, Strings::Keep)
}

/// What [`scan`] does with a string's contents.
#[derive(Clone, Copy, PartialEq)]
enum Strings {
    Keep,
    Blank,
}

/// `text` with comments blanked and strings kept or blanked.
fn scan(text: &str, strings: Strings) -> String {
    let keep = |c: char| if strings == Strings::Keep || c == '\n' { c } else { ' ' };
    let quote = if strings == Strings::Keep { '"' } else { ' ' };
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !chars[..i].last().is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"…", r#"…"#, as many `#` as it opens with.
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            out.push(quote);
            i += 2 + hashes;
            while i < chars.len() && !chars[i..].starts_with(&close) {
                out.push(keep(chars[i]));
                i += 1;
            }
            out.push(quote);
            i += close.len();
        } else if c == '"' {
            out.push(quote);
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 2;
                    continue;
                }
                out.push(keep(chars[i]));
                i += 1;
            }
            out.push(quote);
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A char literal ('"', '\''), not a lifetime.
            let len = if next == Some('\\') {
                chars[i + 2..].iter().position(|&q| q == '\'').map_or(2, |p| p + 3)
            } else {
                3
            };
            out.push(' ');
            i += len;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// A token's words, lowercase: split on `_`, digits and case
/// (`CCL_COV_CUPTI_PATH` gives `ccl cov cupti path`, `isHip` gives `is hip`,
/// `CUPTIActivity` gives `cupti activity`, `nvptx64` gives `nvptx`).
fn split_words(token: &str) -> Vec<String> {
    let chars: Vec<char> = token.chars().collect();
    let mut words = Vec::new();
    let mut word = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphabetic() {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            continue;
        }
        let prev = i.checked_sub(1).map(|p| chars[p]);
        let next = chars.get(i + 1);
        let starts = c.is_uppercase()
            && (prev.is_some_and(char::is_lowercase)
                || (prev.is_some_and(char::is_uppercase) && next.is_some_and(|n| n.is_lowercase())));
        if starts && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// The raw tokens of `code` (letters, digits and `_`), each with its words.
fn tokens(code: &str) -> impl Iterator<Item = &str> {
    code.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|t| !t.is_empty())
}

/// Whether `token` is a target name of one of `prefixes`: the prefix, then a
/// digit (`sm_90`, `compute_90a`, `gfx90a`; `compute_totals` is not one).
fn is_target(token: &str, prefixes: &[String]) -> bool {
    let lower = token.to_ascii_lowercase();
    prefixes
        .iter()
        .any(|p| lower.strip_prefix(p.as_str()).is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit())))
}

/// Whether `line` declares a vendor's folder: `mod nvidia;`, `pub mod amdgpu;`.
fn declares_vendor(line: &str, vendors: &[Vendor]) -> bool {
    let line = line.trim();
    let Some(rest) = line.strip_suffix(';') else { return false };
    let rest = rest.strip_prefix("pub(crate) ").or_else(|| rest.strip_prefix("pub ")).unwrap_or(rest);
    rest.strip_prefix("mod ").is_some_and(|name| vendors.iter().any(|v| v.name == name.trim()))
}

/// Every place whose code (tests and comments left out, strings whole)
/// names a vendor outside that vendor's own folder, `device/<vendor>/`.
fn vendor_leaks(src: &Path) -> Result<Vec<String>, String> {
    let vendors = vendors(src)?;
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    let mut leaks = BTreeSet::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap().to_string_lossy().into_owned();
        if rel == REGISTRY || rel.ends_with("tests.rs") || rel.ends_with("test_backend.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = without_comments(test_module_cut(&text));
        for (n, line) in code.lines().enumerate() {
            if rel == DEVICE_FRONT && declares_vendor(line, &vendors) {
                continue;
            }
            for vendor in vendors.iter().filter(|v| !rel.starts_with(&format!("device/{}/", v.name))) {
                let spoken_for = |word: &str| vendor.spoken_for.iter().any(|(f, w)| *f == rel && w == word);
                for token in tokens(line) {
                    if is_target(token, &vendor.targets) {
                        leaks.insert(format!("src/{rel}:{} names {token} ({}'s target)", n + 1, vendor.name));
                    }
                    for word in split_words(token).into_iter().filter(|w| vendor.words.contains(w) && !spoken_for(w)) {
                        leaks.insert(format!("src/{rel}:{} names {word} ({})", n + 1, vendor.name));
                    }
                }
            }
        }
    }
    Ok(leaks.into_iter().collect())
}

/// A file's code before the unit-test module that closes it.
fn test_module_cut(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod tests").or_else(|| text.find("#[cfg(test)]\npub(crate) mod tests")) {
        Some(at) => &text[..at],
        None => text,
    }
}

/// A backend is one folder under `device/` and one line in its registry: the
/// other stages, and the device stage's own front, ask vendor-neutral questions
/// (docs/architecture.md, "Adding a device backend").
#[test]
fn no_file_but_a_vendor_s_own_folder_names_the_vendor() {
    let leaks = vendor_leaks(&Path::new(ROOT).join("src")).unwrap();
    assert!(leaks.is_empty(), "vendors named outside their folders:\n{}", leaks.join("\n"));
}

/// A scratch `src/` with two backends declared as the real ones are.
fn scratch_backends() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for folder in ["device/nvidia", "device/amdgpu", "report", "exec"] {
        std::fs::create_dir_all(dir.path().join(folder)).unwrap();
    }
    for vendor in ["nvidia", "amdgpu"] {
        let real = Path::new(ROOT).join("src/device").join(vendor);
        std::fs::copy(real.join(WORDS_FILE), dir.path().join("device").join(vendor).join(WORDS_FILE)).unwrap();
        std::fs::copy(real.join("mod.rs"), dir.path().join("device").join(vendor).join("mod.rs")).unwrap();
    }
    std::fs::write(dir.path().join("device/registry.rs"), "&nvidia::Nvidia, &amdgpu::Amdgpu\n").unwrap();
    std::fs::write(dir.path().join("device/mod.rs"), "pub mod amdgpu;\nmod nvidia;\n").unwrap();
    dir
}

#[test]
fn a_vendor_named_outside_its_folder_is_caught() {
    let dir = scratch_backends();
    std::fs::write(
        dir.path().join("report/mod.rs"),
        "// NVIDIA in a comment\nlet shipped = \"CUPTI dropped\"; let cudaless = 1; let s = '\"'; let c = compute_totals;\n#[cfg(test)]\nmod tests { rocm }\n",
    )
    .unwrap();
    assert_eq!(vendor_leaks(dir.path()).unwrap(), ["src/report/mod.rs:2 names cupti (nvidia)"]);
}

/// The six leaks a review planted past the earlier test, each caught alone.
#[test]
fn every_planted_leak_is_caught() {
    let cases = [
        ("let v = \"CCL_COV_CUPTI_PATH\";", "cupti (nvidia)"),
        ("let t = \"gfx90a\";", "gfx90a (amdgpu's target)"),
        ("let t = \"sm_90\";", "sm_90 (nvidia's target)"),
        ("fn nvidia_smi_gpus() {}", "nvidia (nvidia)"),
        ("let url = \"https://developer.nvidia.com/cupti\";", "cupti (nvidia)"),
        ("mod cupti;", "cupti (nvidia)"),
        ("fn f() { is_hip() }", "hip (amdgpu)"),
        ("let v = \"NVCC_APPEND_FLAGS\";", "nvcc (nvidia)"),
        ("let r = r#\"a // \"rocm\" b\"#;", "rocm (amdgpu)"),
        ("fn a<'a>(x: &'a str) -> &'a str { \"CUDA\" }", "cuda (nvidia)"),
    ];
    for (code, leak) in cases {
        let dir = scratch_backends();
        std::fs::write(dir.path().join("report/mod.rs"), format!("{code}\n")).unwrap();
        let leaks = vendor_leaks(dir.path()).unwrap();
        assert!(leaks.iter().any(|l| l.ends_with(leak)), "{code}: {leaks:?}");
    }
    // A vendor's `mod` line is a declaration only in device/mod.rs.
    let dir = scratch_backends();
    std::fs::write(dir.path().join("exec/mod.rs"), "mod nvidia;\n").unwrap();
    assert_eq!(vendor_leaks(dir.path()).unwrap(), ["src/exec/mod.rs:1 names nvidia (nvidia)"]);
}

/// A backend folder without its words, or with a word that is two, stops the test.
#[test]
fn a_backend_must_declare_its_words() {
    let dir = scratch_backends();
    std::fs::create_dir_all(dir.path().join("device/intel")).unwrap();
    std::fs::write(
        dir.path().join("device/intel/mod.rs"),
        "fn target_forms(&self) -> &'static str { \"xe_* (Intel)\" }",
    )
    .unwrap();
    let err = vendor_leaks(dir.path()).unwrap_err();
    assert!(err.contains("device/intel/vendor-words.txt"), "{err}");
    std::fs::write(dir.path().join("device/intel/vendor-words.txt"), "level_zero\n").unwrap();
    assert!(vendor_leaks(dir.path()).unwrap_err().contains("not one word"));
    std::fs::write(dir.path().join("device/intel/vendor-words.txt"), "# Intel's words\nzero sycl\n").unwrap();
    std::fs::write(dir.path().join("report/mod.rs"), "let d = \"xe_12\"; let q = SyclQueue;\n").unwrap();
    assert_eq!(
        vendor_leaks(dir.path()).unwrap(),
        ["src/report/mod.rs:1 names sycl (intel)", "src/report/mod.rs:1 names xe_12 (intel's target)"]
    );
}

#[test]
fn words_split_on_underscores_digits_and_case() {
    let split = |t: &str| split_words(t).join(" ");
    assert_eq!(split("CCL_COV_CUPTI_PATH"), "ccl cov cupti path");
    assert_eq!(split("isHip"), "is hip");
    assert_eq!(split("CUPTIActivityKind"), "cupti activity kind");
    assert_eq!(split("nvptx64"), "nvptx");
    assert_eq!(split("gfx90a"), "gfx a");
    assert_eq!(split("HIPCC"), "hipcc");
}

/// A module's path from `src/`: `src/report/session/mod.rs` is `report::session`.
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel.trim_end_matches(".rs").split('/').map(String::from).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The paths a use tree at `chars[i..]` names, each with the name it binds
/// (its last segment, or its `as` alias): `a::{b, c::{d as e, *}}` gives
/// `a::b` (b), `a::c::d` (e) and `a::c::*`.
fn use_tree(chars: &[char], mut i: usize, prefix: &[String]) -> (Vec<(Vec<String>, String)>, usize) {
    let skip_ws = |i: &mut usize| {
        while chars.get(*i).is_some_and(|c| c.is_whitespace()) {
            *i += 1;
        }
    };
    let mut path = prefix.to_vec();
    loop {
        skip_ws(&mut i);
        match chars.get(i) {
            Some('{') => {
                i += 1;
                let mut found = Vec::new();
                loop {
                    skip_ws(&mut i);
                    match chars.get(i) {
                        None => return (found, i),
                        Some('}') => return (found, i + 1),
                        Some(',') => i += 1,
                        Some(_) => {
                            let (sub, next) = use_tree(chars, i, &path);
                            found.extend(sub);
                            if next == i {
                                return (found, i);
                            }
                            i = next;
                        }
                    }
                }
            }
            Some('*') => {
                path.push("*".into());
                return (vec![(path, "*".into())], i + 1);
            }
            _ => {}
        }
        let ident: String = chars[i..].iter().take_while(|c| c.is_alphanumeric() || **c == '_').collect();
        if ident.is_empty() {
            let name = path.last().cloned().unwrap_or_default();
            return (if path.len() > prefix.len() { vec![(path, name)] } else { Vec::new() }, i);
        }
        i += ident.chars().count();
        if ident != "self" {
            path.push(ident);
        }
        if chars[i..].starts_with(&[':', ':']) {
            i += 2;
            continue;
        }
        let mut name = path.last().cloned().unwrap_or_default();
        let mut after = i;
        skip_ws(&mut after);
        if chars[after..].starts_with(&['a', 's', ' ']) {
            after += 3;
            skip_ws(&mut after);
            name = chars[after..].iter().take_while(|c| c.is_alphanumeric() || **c == '_').collect();
            i = after + name.chars().count();
        }
        return (vec![(path, name)], i);
    }
}

/// What one module's code names: each `crate::`, `super::` and `self::` path
/// (use trees expanded), and each name its `use` items bind, resolved.
#[derive(Default)]
struct Names {
    paths: Vec<Vec<String>>,
    /// Name bound by a `use` (`Runs`, or `*` for a glob) to the absolute path it names.
    bound: Vec<(String, Vec<String>)>,
    code: String,
}

fn names_of(code: &str, me: &[String], modules: &BTreeSet<Vec<String>>) -> Names {
    let chars: Vec<char> = code.chars().collect();
    let text: String = chars.iter().collect();
    let mut names = Names { code: text.clone(), ..Names::default() };
    let ident = |c: &char| c.is_alphanumeric() || *c == '_';
    // An absolute path from a path as written in `me`.
    let absolute = |path: &[String]| -> Option<Vec<String>> {
        let mut base: Vec<String> = me.to_vec();
        let mut rest = path;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("super") | Some("self") => {
                while let Some(first) = rest.first() {
                    match first.as_str() {
                        "super" => {
                            base.pop()?;
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = &rest[1..];
                }
            }
            // A bare path names a child module, or another crate.
            Some(first) if modules.contains(&[me, &[first.to_string()]].concat()) => {}
            _ => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    };
    for (at, _) in text.char_indices() {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| ident(&c) || c == '$' || c == ':') {
            continue;
        }
        let rest = &text[at..];
        let start = chars.len() - rest.chars().count();
        if rest.starts_with("use ") {
            let (trees, _) = use_tree(&chars, start + 4, &[]);
            for (path, name) in trees {
                if let Some(abs) = absolute(&path) {
                    names.paths.push(abs.clone());
                    names.bound.push((name, abs));
                }
            }
        } else if ["crate::", "super::", "self::"].iter().any(|p| rest.starts_with(p)) {
            let (trees, _) = use_tree(&chars, start, &[]);
            names.paths.extend(trees.iter().filter_map(|(path, _)| absolute(path)));
        }
    }
    names
}

/// The module `path` names: its longest module prefix, followed through
/// the names that module's `use` items bind (a re-export in a `mod.rs`).
fn resolve(
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
    names: &std::collections::BTreeMap<Vec<String>, Names>,
    depth: usize,
) -> Option<Vec<String>> {
    let mut module = path.to_vec();
    while !module.is_empty() && !modules.contains(&module) {
        module.pop();
    }
    let next = path.get(module.len());
    let (Some(next), Some(found), true) = (next, names.get(&module), depth < 8) else {
        return (!module.is_empty()).then_some(module);
    };
    let rest = &path[module.len() + 1..];
    if let Some((_, target)) = found.bound.iter().find(|(name, _)| name == next) {
        return resolve(&[target.as_slice(), rest].concat(), modules, names, depth + 1);
    }
    // A glob re-export: the module it names, if that module defines the name.
    for (_, glob) in found.bound.iter().filter(|(name, _)| name == "*") {
        let source = &glob[..glob.len() - 1];
        if names.get(source).is_some_and(|n| defines(&n.code, next)) {
            return resolve(&[source, &[next.clone()][..], rest].concat(), modules, names, depth + 1);
        }
    }
    (!module.is_empty()).then_some(module)
}

/// Whether `code` defines an item called `name`.
fn defines(code: &str, name: &str) -> bool {
    ["fn", "struct", "enum", "type", "const", "static", "trait", "union"].iter().any(|kw| {
        code.match_indices(&format!("{kw} {name}")).any(|(at, m)| {
            !code[at + m.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
                && !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_')
        })
    })
}

/// The modules of `src/` that each module's code (tests left out) names, by
/// `crate::`, `super::` and `self::` paths (use trees expanded), each
/// resolved to the module that defines what it names: `use super::Runs` in
/// `results/load.rs` names `results::runs` when `results/mod.rs` re-exports it.
fn module_imports(src: &Path) -> std::collections::BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let modules: BTreeSet<Vec<String>> =
        files.iter().map(|f| module_of(&f.strip_prefix(src).unwrap().to_string_lossy())).collect();
    let names: std::collections::BTreeMap<Vec<String>, Names> = files
        .iter()
        .map(|file| {
            let me = module_of(&file.strip_prefix(src).unwrap().to_string_lossy());
            let code = non_test_code(&std::fs::read_to_string(file).unwrap());
            let found = names_of(&code, &me, &modules);
            (me, found)
        })
        .collect();
    names
        .iter()
        .map(|(me, found)| {
            let named = found
                .paths
                .iter()
                .filter_map(|path| resolve(path, &modules, &names, 0))
                .filter(|module| module != me)
                .collect();
            (me.clone(), named)
        })
        .collect()
}

/// Every circle of imports between the files of one folder, as `a -> b -> a`.
fn circles(imports: &std::collections::BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<String> {
    let siblings = |a: &Vec<String>, b: &Vec<String>| a.len() == b.len() && a[..a.len() - 1] == b[..b.len() - 1];
    let mut found = BTreeSet::new();
    for start in imports.keys() {
        // Depth-first from `start` along sibling imports, back to `start`.
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, path)) = stack.pop() {
            for next in imports.get(&at).into_iter().flatten().filter(|n| siblings(n, start)) {
                if next == start {
                    let mut names: Vec<String> = path.iter().map(|m| m.join("::")).collect();
                    // One circle, whichever file it is read from: from its smallest name.
                    let least = names.iter().enumerate().min_by_key(|(_, n)| (*n).clone()).map_or(0, |(i, _)| i);
                    names.rotate_left(least);
                    names.push(names[0].clone());
                    found.insert(names.join(" -> "));
                } else if !path.contains(next) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    found.into_iter().collect()
}

/// Inside a folder too, data flows one way: no two files of one folder import
/// each other, directly or round a longer circle.
#[test]
fn no_folder_holds_a_circle_of_imports() {
    let found = circles(&module_imports(&Path::new(ROOT).join("src")));
    assert!(found.is_empty(), "files that import each other:\n{}", found.join("\n"));
}

#[test]
fn a_circle_of_imports_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("stage")).unwrap();
    std::fs::write(dir.path().join("stage/mod.rs"), "mod a;\nmod b;\nmod c;\n").unwrap();
    std::fs::write(dir.path().join("stage/a.rs"), "use super::b::B;\n// super::c::C in a comment\n").unwrap();
    std::fs::write(dir.path().join("stage/b.rs"), "use crate::stage::c::{C, D};\n").unwrap();
    std::fs::write(
        dir.path().join("stage/c.rs"),
        "fn f() { super::a::g() }\n#[cfg(test)]\nmod tests { use super::super::b; }\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("other.rs"), "use crate::stage::a;\n").unwrap();
    assert_eq!(circles(&module_imports(dir.path())), ["stage::a -> stage::b -> stage::c -> stage::a"]);
}

/// The circle a review wrote past the earlier test: through the folder's
/// `mod.rs` re-export (`use super::Runs`), a brace list and a glob.
#[test]
fn a_circle_through_re_exports_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("results")).unwrap();
    std::fs::write(
        dir.path().join("results/mod.rs"),
        "mod load;\nmod runs;\nmod write;\npub(crate) use runs::Runs;\npub use write::*;\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("results/runs.rs"), "pub(crate) struct Runs;\nuse super::{load::read as r};\n")
        .unwrap();
    std::fs::write(dir.path().join("results/load.rs"), "use super::Runs;\npub fn read() {}\n").unwrap();
    assert_eq!(circles(&module_imports(dir.path())), ["results::load -> results::runs -> results::load"]);
    // Through a glob: `write` defines `Record`, and `load` names it through the `results` module.
    std::fs::write(dir.path().join("results/runs.rs"), "pub(crate) struct Runs;\n").unwrap();
    std::fs::write(
        dir.path().join("results/write.rs"),
        "pub struct Record;\nfn f() { crate::results::load::read() }\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("results/load.rs"), "pub fn read() {}\nfn g(_: crate::results::Record) {}\n")
        .unwrap();
    assert_eq!(circles(&module_imports(dir.path())), ["results::load -> results::write -> results::load"]);
}

#[test]
fn use_trees_name_each_path_and_what_it_binds() {
    let chars: Vec<char> = "a::{b, c::{d as e, *}, self};".chars().collect();
    let (found, _) = use_tree(&chars, 0, &[]);
    let shown: Vec<String> = found.iter().map(|(p, n)| format!("{}={n}", p.join("::"))).collect();
    assert_eq!(shown, ["a::b=b", "a::c::d=e", "a::c::*=*", "a=a"]);
}

/// String literals that word a message themselves, outside the reporter, and why
/// they may: the prefix is the reporter's (`reporter::PREFIX`).
const PREFIX_SPOKEN_FOR: [(&str, &str); 2] = [
    // The title of llvm-cov's HTML pages, not a line on the terminal.
    ("report/session/merge.rs", "HTML title"),
    ("report/session/steps.rs", "HTML title"),
];

/// Every string literal of `src/` (tests and comments left out) that starts with the
/// reporter's prefix, outside the reporter.
fn typed_prefixes(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap().to_string_lossy().into_owned();
        if rel == "reporter.rs" || rel.ends_with("tests.rs") || PREFIX_SPOKEN_FOR.iter().any(|(f, _)| *f == rel) {
            continue;
        }
        let code = without_comments(test_module_cut(&std::fs::read_to_string(&file).unwrap()));
        for (n, line) in code.lines().enumerate() {
            if line.contains("\"ccl-coverage:") {
                found.push(format!("src/{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    found
}

/// The reporter owns the prefix and the warning form: a stage says what happened.
#[test]
fn no_message_outside_the_reporter_types_the_prefix() {
    let found = typed_prefixes(&Path::new(ROOT).join("src"));
    assert!(found.is_empty(), "messages that type `ccl-coverage:` themselves:\n{}", found.join("\n"));
}

#[test]
fn a_typed_prefix_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("build")).unwrap();
    std::fs::write(dir.path().join("reporter.rs"), "const PREFIX: &str = \"ccl-coverage: \";\n").unwrap();
    std::fs::write(
        dir.path().join("build/mod.rs"),
        "// \"ccl-coverage: in a comment\"\nfn f() { say!(\"ccl-coverage: warning: {x}\") }\n#[cfg(test)]\nmod tests { \"ccl-coverage: t\" }\n",
    )
    .unwrap();
    assert_eq!(typed_prefixes(dir.path()), ["src/build/mod.rs:2: fn f() { say!(\"ccl-coverage: warning: {x}\") }"]);
}

/// The stages below the harness (docs/architecture.md, "What the terminal
/// says") report what happened as typed events: no free-text macro in their
/// code, tests aside.
const EVENT_STAGES: [&str; 6] = ["exec", "workspace", "build", "device", "coverage", "results"];

/// Every free-text message (`say!`, `note!`, `warning!`, `detail!`) in the code of `stages` under `src`.
fn free_text_in_stages(src: &Path, stages: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for stage in stages {
        let mut files = Vec::new();
        sources(&src.join(stage), &mut files);
        files.sort();
        for file in files {
            let rel = file.strip_prefix(src).unwrap().to_string_lossy().into_owned();
            let code = non_test_code(&std::fs::read_to_string(&file).unwrap());
            for (n, line) in code.lines().enumerate() {
                if ["say!(", "note!(", "warning!(", "detail!("].iter().any(|m| line.contains(m)) {
                    found.push(format!("src/{rel}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn the_stages_below_the_harness_speak_in_typed_events() {
    let found = free_text_in_stages(&Path::new(ROOT).join("src"), &EVENT_STAGES);
    assert!(found.is_empty(), "free text where a typed event belongs:\n{}", found.join("\n"));
}

#[test]
fn free_text_in_a_stage_is_caught_and_a_test_of_it_is_not() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("build/cache")).unwrap();
    std::fs::write(
        dir.path().join("build/cache/mod.rs"),
        "fn f() {\n    crate::warning!(\"x {y}\");\n}\n#[cfg(test)]\nmod tests {\n    fn t() { crate::say!(\"skipping\"); }\n}\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("harness")).unwrap();
    std::fs::write(dir.path().join("harness/mod.rs"), "fn g() { crate::say!(\"above the stages\"); }\n").unwrap();
    assert_eq!(
        free_text_in_stages(dir.path(), &["build"]),
        ["src/build/cache/mod.rs:2: crate::warning!(       );"],
        "the harness, above the stages, may keep free text"
    );
}
