//! The rules between the steps of the operator crate, checked from its code.
//!
//! The crates keep the big borders (`decide` and `resources` cannot do I/O:
//! their dependencies hold no client). Inside `crates/operator`, one module per
//! file, this reads every file with `syn`, resolves every path that names a
//! module of the crate (`use` trees, grouped or nested, and paths in code and
//! types: `crate::`, `super::` at any depth, `self::`), and follows those
//! references from module to module. A rule is broken when a step reaches a
//! module it must not, directly or through any chain of other modules (a hub
//! such as a `mod.rs` that declares every step counts: reaching it reaches
//! all it declares).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// A module of the crate, by its path from the crate root (`["controller", "act"]`).
pub type ModPath = Vec<String>;

/// One rule: modules under `from` reach nothing under any of `to`.
pub struct Rule {
    pub from: &'static [&'static str],
    pub to: &'static [&'static [&'static str]],
    pub why: &'static str,
}

/// The operator crate's rules (docs/architecture.md).
pub const RULES: &[Rule] = &[
    Rule {
        from: &["controller", "observe"],
        to: &[
            &["controller", "act"],
            &["controller", "report"],
            &["controller", "reconcile"],
        ],
        why: "observe reads only",
    },
    Rule {
        from: &["controller", "act"],
        to: &[&["controller", "report"], &["controller", "reconcile"]],
        why: "act says what happened; report writes it",
    },
    Rule {
        from: &["controller", "report"],
        to: &[&["controller", "act"], &["controller", "reconcile"]],
        why: "report writes status from what act said",
    },
    Rule {
        from: &["backup"],
        to: &[
            &["controller", "observe"],
            &["controller", "act"],
            &["controller", "report"],
            &["controller", "reconcile"],
        ],
        why: "one controller does not reach into another's steps",
    },
    Rule {
        from: &["replication", "observe"],
        to: &[
            &["replication", "act"],
            &["replication", "report"],
            &["replication", "reconcile"],
        ],
        why: "observe reads only",
    },
    Rule {
        from: &["replication", "act"],
        to: &[&["replication", "report"], &["replication", "reconcile"]],
        why: "act says what happened; report writes it",
    },
    Rule {
        from: &["replication", "report"],
        to: &[&["replication", "act"], &["replication", "reconcile"]],
        why: "report writes status from what act said",
    },
    Rule {
        from: &["replication"],
        to: &[
            &["controller", "observe"],
            &["controller", "act"],
            &["controller", "report"],
            &["controller", "reconcile"],
            &["backup"],
        ],
        why: "one controller does not reach into another's steps",
    },
];

/// A file's module path: `a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` and
/// `main.rs` the root.
pub fn module_of(rel: &Path) -> ModPath {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        let at_root = parts.is_empty() && (stem == "lib" || stem == "main");
        if stem != "mod" && !at_root {
            parts.push(stem.to_string());
        }
    }
    parts
}

/// Every module path of the crate another module's code names, with the
/// line it is named on.
struct Refs<'a> {
    /// The file's module, then the inline modules the visitor is inside.
    here: Vec<String>,
    /// Module paths that exist (files), to cut a path at its module.
    modules: &'a BTreeSet<ModPath>,
    found: Vec<(ModPath, usize)>,
}

impl Refs<'_> {
    /// The module an absolute or relative path names, if it is one of the crate's.
    fn resolve(&mut self, segments: &[String], line: usize) {
        let Some(first) = segments.first() else {
            return;
        };
        let mut base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "self" => self.here.clone(),
            "super" => self.here.clone(),
            _ => return,
        };
        let mut rest = &segments[1..];
        if first == "super" {
            base.pop();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        let mut path = base;
        let mut deepest = None;
        if self.modules.contains(&path) {
            deepest = Some(path.clone());
        }
        for seg in rest {
            if seg == "self" {
                continue;
            }
            path.push(seg.clone());
            if self.modules.contains(&path) {
                deepest = Some(path.clone());
            }
        }
        if let Some(m) = deepest {
            self.found.push((m, line));
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, line: usize) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, line);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.resolve(&prefix.clone(), line);
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.resolve(&prefix.clone(), line);
                prefix.pop();
            }
            // `use x::*` reaches module x (and so all it declares).
            syn::UseTree::Glob(_) => self.resolve(&prefix.clone(), line),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t, line);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Refs<'_> {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let line = u.use_token.span.start().line;
        let mut prefix = Vec::new();
        self.use_tree(&mut prefix, &u.tree, line);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = p
            .segments
            .first()
            .map(|s| s.ident.span().start().line)
            .unwrap_or(0);
        self.resolve(&segments, line);
        syn::visit::visit_path(self, p);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.here.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.here.pop();
        } else {
            // `mod x;` declares x: reaching this module reaches x.
            let mut child = self.here.clone();
            child.push(m.ident.to_string());
            if self.modules.contains(&child) {
                self.found.push((child, m.ident.span().start().line));
            }
        }
    }
}

/// One reference of a module to another: where it is written.
#[derive(Debug, Clone)]
pub struct Edge {
    pub file: PathBuf,
    pub line: usize,
}

/// The crate's modules and who names whom.
pub struct Graph {
    pub files: BTreeMap<ModPath, PathBuf>,
    pub edges: BTreeMap<ModPath, BTreeMap<ModPath, Edge>>,
}

/// Reads the crate whose `src` folder is `src`. `files` are (path relative to
/// `src`, text); a file that does not parse is an error naming it.
pub fn graph(files: &[(PathBuf, String)]) -> Result<Graph, String> {
    let modules: BTreeSet<ModPath> = files.iter().map(|(p, _)| module_of(p)).collect();
    let mut out = Graph {
        files: BTreeMap::new(),
        edges: BTreeMap::new(),
    };
    for (rel, text) in files {
        let ast = syn::parse_file(text).map_err(|e| format!("{}: {e}", rel.display()))?;
        let here = module_of(rel);
        let mut refs = Refs {
            here: here.clone(),
            modules: &modules,
            found: Vec::new(),
        };
        refs.visit_file(&ast);
        let entry = out.edges.entry(here.clone()).or_default();
        for (to, line) in refs.found {
            if to != here {
                entry.entry(to).or_insert(Edge {
                    file: rel.clone(),
                    line,
                });
            }
        }
        out.files.insert(here, rel.clone());
    }
    Ok(out)
}

fn under(m: &[String], prefix: &[&str]) -> bool {
    m.len() >= prefix.len() && m.iter().zip(prefix).all(|(a, b)| a == b)
}

/// How far [`check`] follows references.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// What a step's own modules name.
    Direct,
    /// Through any chain of modules (a hub included).
    Transitive,
}

/// Every broken rule, each with the chain of references that breaks it.
pub fn check(g: &Graph, rules: &[Rule], reach: Reach) -> Vec<String> {
    let mut broken = Vec::new();
    for rule in rules {
        for start in g.files.keys().filter(|m| under(m, rule.from)) {
            // Breadth first from `start`, never through its own step's
            // modules' forbidden targets more than once.
            let mut prev: BTreeMap<ModPath, ModPath> = BTreeMap::new();
            let mut queue = VecDeque::from([start.clone()]);
            let mut seen = BTreeSet::from([start.clone()]);
            while let Some(m) = queue.pop_front() {
                let forbidden = rule.to.iter().any(|t| under(&m, t));
                if forbidden {
                    let mut chain = vec![m.clone()];
                    let mut at = m.clone();
                    while let Some(p) = prev.get(&at) {
                        chain.push(p.clone());
                        at = p.clone();
                    }
                    chain.reverse();
                    let steps: Vec<String> = chain
                        .windows(2)
                        .map(|w| {
                            let e = &g.edges[&w[0]][&w[1]];
                            format!("{}:{} -> {}", e.file.display(), e.line, w[1].join("::"))
                        })
                        .collect();
                    broken.push(format!(
                        "{} reaches {} ({}): {}",
                        start.join("::"),
                        m.join("::"),
                        rule.why,
                        steps.join(", ")
                    ));
                    continue;
                }
                if reach == Reach::Direct && !under(&m, rule.from) {
                    continue;
                }
                for next in g.edges.get(&m).into_iter().flat_map(|e| e.keys()) {
                    // The crate root only declares the modules: naming it
                    // (`crate::x` of an item of lib.rs) reaches nothing.
                    if next.is_empty() {
                        continue;
                    }
                    if seen.insert(next.clone()) {
                        prev.insert(next.clone(), m.clone());
                        queue.push_back(next.clone());
                    }
                }
            }
        }
    }
    broken.sort();
    broken.dedup();
    broken
}

/// Reads every `.rs` file under `src`.
pub fn read_tree(src: &Path) -> std::io::Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).unwrap_or(&path).to_path_buf();
                out.push((rel, std::fs::read_to_string(&path)?));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Where a file names a function or a module of the pure `decide` crate
/// (a `use` of a lowercase name or a glob, a `decide::module::function`
/// path in code): what act may not do. Types of decide (the plan, the facts)
/// and their associated functions (`PodFacts::of`) are act's to use.
pub fn decide_functions(text: &str) -> Result<Vec<(usize, String)>, String> {
    struct Uses(Vec<(usize, String)>);
    fn lower(name: &str) -> bool {
        name.chars().next().is_some_and(char::is_lowercase)
    }
    fn tree(
        out: &mut Vec<(usize, String)>,
        prefix: &mut Vec<String>,
        t: &syn::UseTree,
        line: usize,
    ) {
        match t {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                tree(out, prefix, &p.tree, line);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                if prefix.first().map(String::as_str) == Some("decide")
                    && (lower(&name) || prefix.len() == 1 && name == "self")
                {
                    out.push((line, format!("use {}::{name}", prefix.join("::"))));
                }
            }
            syn::UseTree::Rename(r) => {
                let name = r.ident.to_string();
                if prefix.first().map(String::as_str) == Some("decide") && lower(&name) {
                    out.push((line, format!("use {}::{name}", prefix.join("::"))));
                }
            }
            syn::UseTree::Glob(_) => {
                if prefix.first().map(String::as_str) == Some("decide") {
                    out.push((line, format!("use {}::*", prefix.join("::"))));
                }
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    tree(out, prefix, t, line);
                }
            }
        }
    }
    impl<'ast> Visit<'ast> for Uses {
        fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
            let line = u.use_token.span.start().line;
            let mut prefix = Vec::new();
            // `use ::decide::x` names the same crate.
            tree(&mut self.0, &mut prefix, &u.tree, line);
        }
        fn visit_expr_path(&mut self, e: &'ast syn::ExprPath) {
            let segs: Vec<String> = e
                .path
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .collect();
            if segs.len() >= 2
                && segs[0] == "decide"
                && lower(&segs[segs.len() - 1])
                && lower(&segs[segs.len() - 2])
            {
                let line = e.path.segments[0].ident.span().start().line;
                self.0.push((line, segs.join("::")));
            }
            syn::visit::visit_expr_path(self, e);
        }
    }
    let ast = syn::parse_file(text).map_err(|e| e.to_string())?;
    let mut uses = Uses(Vec::new());
    uses.visit_file(&ast);
    Ok(uses.0)
}

/// Every place a module of act (`controller::act`) names a function or a
/// module of `decide` ([`decide_functions`]).
pub fn act_calls_decide(files: &[(PathBuf, String)]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (rel, text) in files {
        if !under(&module_of(rel), &["controller", "act"]) {
            continue;
        }
        for (line, what) in decide_functions(text).map_err(|e| format!("{}: {e}", rel.display()))? {
            out.push(format!(
                "{}:{line}: act names {what} (act carries a plan out: decide's functions are the driver's to call)",
                rel.display()
            ));
        }
    }
    Ok(out)
}
