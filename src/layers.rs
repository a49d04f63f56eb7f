//! The layering of src/ (the comment at the top of main.rs; ARCHITECTURE.md,
//! "Layers"), held by a test: it reads every `crate::`, `super::` and
//! `self::` path in src/ and fails on an import that points up a layer or
//! on a circle between modules (one module a file). A second test holds
//! "no global mutable state" outside zk/ (whose session task owns its own).

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// The top-level modules, highest layer first; a module imports only
    /// from its own top-level module or from a lower layer.
    const LAYERS: &[&[&str]] = &[
        &["main"],
        &["hold"],
        &["run", "status", "list", "break_lock", "generate"],
        &["cli", "present"],
        &["lock", "command"],
        &["session"],
        &[
            "exit", "report", "values", "origin", "zk", "layers", "scratch",
        ],
    ];

    fn layer(top: &str) -> usize {
        (LAYERS.iter().position(|layer| layer.contains(&top)))
            .unwrap_or_else(|| panic!("module {top} is in no layer of src/layers.rs"))
    }

    /// Every .rs file under `dir`, as (module path, text).
    fn modules(root: &Path, dir: &Path, out: &mut BTreeMap<Vec<String>, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                modules(root, &path, out);
                continue;
            }
            if path.extension().is_none_or(|ext| ext != "rs") {
                continue;
            }
            let relative = path.strip_prefix(root).unwrap().with_extension("");
            let mut module: Vec<String> = (relative.iter())
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|last| last == "mod") {
                module.pop();
            }
            // The library's root (only `pub mod zk;`) and this file, whose
            // tests name paths.
            if module == ["lib"] || module == ["layers"] {
                continue;
            }
            out.insert(module, std::fs::read_to_string(&path).unwrap());
        }
    }

    /// The paths a `use` tree names, braces expanded: `a::{b, c::d}`.
    fn expand(tree: &str) -> Vec<String> {
        let tree = tree.trim();
        let Some(open) = tree.find('{') else {
            return vec![tree.split(" as ").next().unwrap().trim().to_owned()];
        };
        let prefix = &tree[..open];
        let inner = &tree[open + 1..tree.rfind('}').unwrap()];
        let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&inner[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&inner[start..]);
        (parts.into_iter())
            .filter(|part| !part.trim().is_empty())
            .flat_map(expand)
            .map(|rest| format!("{prefix}{rest}"))
            .collect()
    }

    /// The `crate::`, `super::` and `self::` paths of a file's code (not
    /// its comments), each as written.
    fn paths(text: &str) -> Vec<String> {
        let mut found = Vec::new();
        let mut statement = String::new();
        for line in text.lines() {
            let code = line.split("//").next().unwrap();
            let trimmed = code.trim_start();
            // `use super::*` in an inline test module names the file itself.
            let inline = code.len() != trimmed.len();
            let starts = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
                .iter()
                .find_map(|start| trimmed.strip_prefix(start));
            if !statement.is_empty() || starts.is_some() {
                statement.push_str(starts.unwrap_or(trimmed));
                if let Some(end) = statement.find(';') {
                    let tree = statement[..end].to_owned();
                    statement.clear();
                    let local = ["crate::", "super::", "self::"];
                    if (inline && tree.starts_with("super::"))
                        || !local.iter().any(|anchor| tree.starts_with(anchor))
                    {
                        continue;
                    }
                    found.extend(expand(&tree));
                }
                continue;
            }
            // `super::` in code is mostly a test module naming its file.
            {
                for (at, _) in code.match_indices("crate::") {
                    let before = code[..at].chars().next_back();
                    if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                        continue;
                    }
                    let path: String = code[at..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                        .collect();
                    found.push(path.trim_end_matches(':').to_owned());
                }
            }
        }
        found
    }

    /// The module a path from `from` names: the longest known prefix.
    fn resolve(from: &[String], path: &str, known: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
        let mut segments: Vec<&str> = path.split("::").collect();
        let mut base: Vec<String> = match segments.first() {
            Some(&"crate") => Vec::new(),
            // A file's `self` is itself; a mod.rs's `super` its parent.
            Some(&"self") => from.to_vec(),
            Some(&"super") => {
                let mut base = from.to_vec();
                base.pop();
                base
            }
            _ => return None,
        };
        segments.remove(0);
        while segments.first() == Some(&"super") {
            base.pop();
            segments.remove(0);
        }
        let mut best = known.contains(&base).then(|| base.clone());
        for segment in segments {
            base.push(segment.to_owned());
            if known.contains(&base) {
                best = Some(base.clone());
            }
        }
        best.or_else(|| Some(vec!["main".to_owned()]))
    }

    fn edges() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = BTreeMap::new();
        modules(&root, &root, &mut files);
        let known: BTreeSet<Vec<String>> = files.keys().cloned().collect();
        let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (module, text) in &files {
            for path in paths(text) {
                let Some(to) = resolve(module, &path, &known) else {
                    continue;
                };
                if to != *module && !module.starts_with(&to) {
                    edges.entry(module.clone()).or_default().insert(to);
                }
            }
        }
        edges
    }

    #[test]
    fn imports_point_down_and_make_no_circle() {
        let edges = edges();
        let mut wrong = Vec::new();
        for (from, targets) in &edges {
            for to in targets {
                let (a, b) = (&from[0], &to[0]);
                if a != b && layer(a) >= layer(b) {
                    wrong.push(format!(
                        "{} imports up from {}",
                        from.join("::"),
                        to.join("::")
                    ));
                }
            }
        }
        // A circle: a module reachable from one it imports.
        for (from, targets) in &edges {
            for to in targets {
                let mut seen = BTreeSet::new();
                let mut stack = vec![to.clone()];
                while let Some(next) = stack.pop() {
                    if &next == from {
                        wrong.push(format!(
                            "{} and {} import each other (maybe through others)",
                            from.join("::"),
                            to.join("::")
                        ));
                        break;
                    }
                    if seen.insert(next.clone()) {
                        stack.extend(edges.get(&next).into_iter().flatten().cloned());
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// Whether a line of code declares global mutable state: a `static`
    /// of a type with interior mutability, or a thread-local.
    fn global_state(code: &str) -> bool {
        let code = code.split("//").next().unwrap().trim_start();
        let code = (code.strip_prefix("pub(crate) "))
            .or_else(|| code.strip_prefix("pub "))
            .unwrap_or(code);
        let mutable = ["Mutex", "RwLock", "Once", "Lazy", "Atomic", "Cell"];
        code.starts_with("thread_local!")
            || code.starts_with("static mut ")
            || (code.starts_with("static ") && mutable.iter().any(|kind| code.contains(kind)))
    }

    /// A run's outputs are values chosen once when it starts and passed
    /// down (ARCHITECTURE.md, "Cross-cutting invariants").
    #[test]
    fn no_global_mutable_state_outside_zk() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = BTreeMap::new();
        modules(&root, &root, &mut files);
        let mut found = Vec::new();
        for (module, text) in &files {
            if module.first().is_some_and(|top| top == "zk") {
                continue;
            }
            for line in text.lines().filter(|line| global_state(line)) {
                found.push(format!("{}: {}", module.join("::"), line.trim()));
            }
        }
        assert!(
            found.is_empty(),
            "global mutable state:\n{}",
            found.join("\n")
        );
    }

    /// `zklock run`'s and `zklock hold`'s command lines are read once,
    /// into run::plan's `Plan`: nothing after it names their clap structs
    /// (ARCHITECTURE.md, "Subcommands").
    #[test]
    fn only_the_plan_reads_the_run_command_line() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = BTreeMap::new();
        modules(&root, &root, &mut files);
        let readers = ["main", "run", "run::plan"];
        let mut found = Vec::new();
        for (module, text) in &files {
            if module[0] == "cli" || readers.contains(&module.join("::").as_str()) {
                continue;
            }
            let mut code = text.lines().map(|line| line.split("//").next().unwrap());
            if code.any(|code| code.contains("RunArgs") || code.contains("LockArgs")) {
                found.push(module.join("::"));
            }
        }
        assert!(
            found.is_empty(),
            "read after the plan: {}",
            found.join(", ")
        );
    }

    #[test]
    fn global_state_is_recognised() {
        for line in [
            "static LINE: Mutex<Option<Bar>> = Mutex::new(None);",
            "    static SENT: AtomicBool = AtomicBool::new(false);",
            "pub(crate) static PINGER: OnceLock<Pinger> = OnceLock::new();",
            "static SOCKET: LazyLock<Option<SocketAddr>> =",
            "static mut COUNT: u32 = 0;",
            "thread_local! {",
        ] {
            assert!(global_state(line), "{line}");
        }
        for line in [
            "static NAMES: [&str; 2] = [\"a\", \"b\"];",
            "pending: std::sync::Mutex<Vec<u8>>,",
            "// static X: Mutex<u8>",
            "fn f() -> &'static str {",
        ] {
            assert!(!global_state(line), "{line}");
        }
    }

    #[test]
    fn paths_are_read_from_use_trees_and_code() {
        assert_eq!(
            expand("crate::lock::{queue::{self, Node}, recipe}"),
            [
                "crate::lock::queue::self",
                "crate::lock::queue::Node",
                "crate::lock::recipe"
            ]
        );
        let text = "use super::x;\n    use super::*;\nfn f() { crate::a::b(); }\n// crate::c\n";
        assert_eq!(paths(text), ["super::x", "crate::a::b"]);
    }
}
