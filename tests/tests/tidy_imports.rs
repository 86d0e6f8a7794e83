//! No import circle inside a crate: every library and binary target of
//! the workspace is read from its root along its `mod` declarations, each
//! file's `use` trees and `crate::`/`super::`/`self::` paths (test modules
//! included) are resolved, through re-exports, to the file that defines
//! what they name, and the strongly connected components of that graph
//! must be single files, so each module can be read knowing only what is
//! beneath it. A module and its own submodules are one room (a `mod.rs`
//! re-exports its parts, a part uses its parent's types): arrows between a
//! file and its ancestors are not counted, arrows between rooms are.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Arrows left in place, each with why, dropped before circles are looked
/// for: the circle each closes stays visible here and nowhere else.
const EXCUSED_ARROWS: &[(&str, &str, &str)] = &[];

/// Circles left in place, each its exact files and why.
const EXCUSED_CIRCLES: &[(&[&str], &str)] = &[
    // State's exec table holds exec.rs's `Running` (private fields, exec's
    // own), and exec.rs files each new one in that table. The natural split,
    // the table moving into exec.rs and State holding it opaque, is not done
    // yet.
    (&["module/src/exec.rs", "module/src/state.rs"], "not split yet"),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Path, // `::`
    Punct(char),
}

/// The tokens of a Rust file with comments, and the contents of character
/// literals, lifetimes and numbers, dropped: enough to follow module
/// declarations and paths.
fn lex(text: &str) -> Vec<Token> {
    let s: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident_char = |c: char| c.is_alphanumeric() || c == '_';
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' || ((c == 'r' || c == 'b') && raw_or_byte_string_at(&s, i)) {
            let (value, end) = string_at(&s, i);
            out.push(Token::Str(value));
            i = end;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            if s.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < s.len() && s[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if s.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < s.len() && ident_char(s[i]) {
                    i += 1;
                }
            }
        } else if c == '$' && s[i + 1..].starts_with(&['c', 'r', 'a', 't', 'e']) {
            // `$crate` inside a macro: the macro's crate, wherever it is used.
            out.push(Token::Ident("$crate".into()));
            i += 6;
        } else if c.is_ascii_digit() {
            while i < s.len() && (ident_char(s[i]) || s[i] == '.') {
                i += 1;
            }
        } else if ident_char(c) {
            let start = i;
            while i < s.len() && ident_char(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            out.push(Token::Ident(word.trim_start_matches("r#").to_owned()));
        } else if c == ':' && next == Some(':') {
            out.push(Token::Path);
            i += 2;
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

fn raw_or_byte_string_at(s: &[char], i: usize) -> bool {
    let mut j = i;
    if s[j] == 'b' {
        j += 1;
    }
    if s.get(j) == Some(&'r') {
        j += 1;
        while s.get(j) == Some(&'#') {
            j += 1;
        }
    }
    j > i && s.get(j) == Some(&'"') && (i == 0 || !(s[i - 1].is_alphanumeric() || s[i - 1] == '_'))
}

/// The value of the string literal starting at `i` and the index after it.
fn string_at(s: &[char], mut i: usize) -> (String, usize) {
    let mut raw = false;
    if s[i] == 'b' {
        i += 1;
    }
    if s[i] == 'r' {
        raw = true;
        i += 1;
    }
    let mut hashes = 0;
    while s[i] == '#' {
        hashes += 1;
        i += 1;
    }
    i += 1; // the opening quote
    let mut value = String::new();
    while i < s.len() {
        if !raw && s[i] == '\\' {
            value.push(s[i]);
            value.push(*s.get(i + 1).unwrap_or(&' '));
            i += 2;
            continue;
        }
        if s[i] == '"' && (0..hashes).all(|h| s.get(i + 1 + h) == Some(&'#')) {
            return (value, i + 1 + hashes);
        }
        value.push(s[i]);
        i += 1;
    }
    (value, i)
}

/// One path a file names, as written, in the module it is written in.
#[derive(Debug)]
struct Reference {
    scope: Vec<String>,
    segments: Vec<String>,
}

/// One `use` a module makes: the name it binds (`None` for a glob) to the
/// path it names, as written.
#[derive(Debug)]
struct Import {
    name: Option<String>,
    segments: Vec<String>,
}

#[derive(Default, Debug)]
struct Module {
    file: PathBuf,
    /// Names of items defined here (structs, enums, functions, ...).
    items: BTreeSet<String>,
    imports: Vec<Import>,
}

#[derive(Default)]
struct Crate {
    modules: BTreeMap<Vec<String>, Module>,
    references: Vec<(PathBuf, Reference)>,
}

/// Expands the use tree at `tokens[*at..]` under `prefix` into `out`.
fn use_tree(tokens: &[Token], at: &mut usize, prefix: Vec<String>, out: &mut Vec<Import>) {
    let mut path = prefix;
    loop {
        match tokens.get(*at) {
            Some(Token::Ident(word)) => {
                *at += 1;
                if word == "self" && !path.is_empty() {
                    // `a::{self}` binds `a` itself.
                } else {
                    path.push(word.clone());
                }
                if tokens.get(*at) == Some(&Token::Path) {
                    *at += 1;
                    continue;
                }
                let mut name = path.last().cloned();
                if tokens.get(*at) == Some(&Token::Ident("as".into())) {
                    name = match tokens.get(*at + 1) {
                        Some(Token::Ident(alias)) if alias != "_" => Some(alias.clone()),
                        _ => None,
                    };
                    *at += 2;
                }
                out.push(Import { name: name.or(Some("_".into())), segments: path });
                return;
            }
            Some(Token::Punct('*')) => {
                *at += 1;
                out.push(Import { name: None, segments: path });
                return;
            }
            Some(Token::Punct('{')) => {
                *at += 1;
                loop {
                    match tokens.get(*at) {
                        Some(Token::Punct('}')) | None => {
                            *at += 1;
                            return;
                        }
                        Some(Token::Punct(',')) => *at += 1,
                        _ => use_tree(tokens, at, path.clone(), out),
                    }
                }
            }
            Some(Token::Path) => *at += 1, // a leading `::`
            _ => return,
        }
    }
}

const ITEM_KEYWORDS: &[&str] = &["struct", "enum", "fn", "type", "trait", "const", "static", "union", "macro_rules"];

/// Reads `file` as the module `path` of `krate`, then the files its `mod`
/// declarations name.
fn read_module(krate: &mut Crate, file: &Path, path: Vec<String>, children_dir: PathBuf) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let tokens = lex(&text);
    // The inline modules open at each brace depth.
    let mut scopes: Vec<(usize, Vec<String>)> = vec![(0, path.clone())];
    let mut depth = 0usize;
    let mut pending_path: Option<String> = None;
    let mut children: Vec<(Vec<String>, PathBuf, PathBuf)> = Vec::new();
    krate.modules.insert(path.clone(), Module { file: file.to_path_buf(), ..Default::default() });
    let mut i = 0;
    while i < tokens.len() {
        let scope = scopes.last().expect("the file's own scope").1.clone();
        match &tokens[i] {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if scopes.len() > 1 && scopes.last().is_some_and(|(d, _)| *d == depth) {
                    scopes.pop();
                }
            }
            Token::Punct('#') => {
                if let [Token::Punct('['), Token::Ident(attr), Token::Punct('='), Token::Str(value), ..] =
                    &tokens[i + 1..]
                    && attr == "path"
                {
                    pending_path = Some(value.clone());
                }
            }
            Token::Ident(word) if word == "mod" => {
                if let Some(Token::Ident(name)) = tokens.get(i + 1) {
                    let mut child = scope.clone();
                    child.push(name.clone());
                    match tokens.get(i + 2) {
                        Some(Token::Punct('{')) => {
                            krate
                                .modules
                                .insert(child.clone(), Module { file: file.to_path_buf(), ..Default::default() });
                            scopes.push((depth, child));
                            depth += 1;
                            i += 3;
                            pending_path = None;
                            continue;
                        }
                        Some(Token::Punct(';')) => {
                            assert_eq!(scopes.len(), 1, "{}: a file module inside an inline module", file.display());
                            let (child_file, grandchildren) = match pending_path.take() {
                                Some(p) => {
                                    let f = file.parent().expect("a directory").join(p);
                                    let dir = f.with_extension("");
                                    (f, dir)
                                }
                                None => {
                                    let flat = children_dir.join(format!("{name}.rs"));
                                    if flat.exists() {
                                        (flat, children_dir.join(name))
                                    } else {
                                        (children_dir.join(name).join("mod.rs"), children_dir.join(name))
                                    }
                                }
                            };
                            children.push((child, child_file, grandchildren));
                        }
                        _ => {}
                    }
                }
            }
            Token::Ident(word) if word == "use" => {
                let mut at = i + 1;
                let mut imports = Vec::new();
                use_tree(&tokens, &mut at, Vec::new(), &mut imports);
                for import in &imports {
                    krate.references.push((
                        file.to_path_buf(),
                        Reference { scope: scope.clone(), segments: import.segments.clone() },
                    ));
                }
                krate.modules.get_mut(&scope).expect("the scope is read").imports.extend(imports);
                i = at;
                continue;
            }
            Token::Ident(word) if ITEM_KEYWORDS.contains(&word.as_str()) => {
                let name = match (word.as_str(), tokens.get(i + 1)) {
                    ("macro_rules", _) => tokens.get(i + 2),
                    (_, t) => t,
                };
                if let Some(Token::Ident(name)) = name {
                    krate.modules.get_mut(&scope).expect("the scope is read").items.insert(name.clone());
                }
            }
            Token::Ident(word)
                if (i == 0 || tokens[i - 1] != Token::Path)
                    && tokens.get(i + 1) == Some(&Token::Path)
                    && word != "$crate" =>
            {
                let mut segments = vec![word.clone()];
                let mut j = i + 1;
                while tokens.get(j) == Some(&Token::Path) {
                    match tokens.get(j + 1) {
                        Some(Token::Ident(next)) => segments.push(next.clone()),
                        _ => break,
                    }
                    j += 2;
                }
                krate.references.push((file.to_path_buf(), Reference { scope: scope.clone(), segments }));
                i = j;
                continue;
            }
            _ => {}
        }
        if !matches!(
            tokens[i],
            Token::Punct('#')
                | Token::Punct('[')
                | Token::Punct(']')
                | Token::Ident(_)
                | Token::Str(_)
                | Token::Punct('=')
                | Token::Punct('(')
                | Token::Punct(')')
                | Token::Punct(',')
        ) {
            pending_path = None;
        }
        i += 1;
    }
    for (child, child_file, grandchildren) in children {
        read_module(krate, &child_file, child, grandchildren);
    }
}

impl Crate {
    /// The absolute module path `segments` names, written in `scope`, or
    /// `None` for another crate's path.
    fn absolute(&self, scope: &[String], segments: &[String]) -> Option<Vec<String>> {
        self.absolute_within(scope, segments, 0)
    }

    fn absolute_within(&self, scope: &[String], segments: &[String], hops: usize) -> Option<Vec<String>> {
        let first = segments.first()?;
        match first.as_str() {
            "crate" => Some(segments[1..].to_vec()),
            "self" => Some(scope.iter().chain(&segments[1..]).cloned().collect()),
            "super" => {
                let mut base = scope.to_vec();
                let mut rest = segments;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                Some(base.into_iter().chain(rest.iter().cloned()).collect())
            }
            _ => {
                let mut child = scope.to_vec();
                child.push(first.clone());
                if self.modules.contains_key(&child) {
                    return Some(scope.iter().chain(segments).cloned().collect());
                }
                // A name this module imported, such as `engine` after `use crate::engine`.
                let import = self.modules.get(scope)?.imports.iter().find(|i| i.name.as_ref() == Some(first))?;
                if hops > 16 || (import.segments.first() == Some(first) && import.segments.len() == 1) {
                    return None;
                }
                let base = self.absolute_within(scope, &import.segments, hops + 1)?;
                Some(base.into_iter().chain(segments[1..].iter().cloned()).collect())
            }
        }
    }

    /// The module that defines what the absolute path `path` names,
    /// following re-exports and imports.
    fn defining(&self, path: &[String], hops: usize) -> Option<Vec<String>> {
        let at = (0..=path.len()).rev().find(|n| self.modules.contains_key(&path[..*n]))?;
        let module_path = path[..at].to_vec();
        let Some(name) = path.get(at) else { return Some(module_path) };
        let module = &self.modules[&module_path];
        if module.items.contains(name) || hops > 16 {
            return Some(module_path);
        }
        let through = |import: &Import, rest: &[String]| {
            let target = self.absolute(&module_path, &import.segments)?;
            self.defining(&target.into_iter().chain(rest.iter().cloned()).collect::<Vec<_>>(), hops + 1)
        };
        if let Some(import) = module.imports.iter().find(|i| i.name.as_ref() == Some(name)) {
            return through(import, &path[at + 1..]).or(Some(module_path));
        }
        for glob in module.imports.iter().filter(|i| i.name.is_none()) {
            if let Some(found) = through(glob, &path[at..])
                && found != module_path
                && self.modules[&found].items.contains(name)
            {
                return Some(found);
            }
        }
        Some(module_path)
    }

    /// The module path of `file` itself (not of an inline module in it).
    fn path_of(&self, file: &Path) -> &[String] {
        self.modules
            .iter()
            .filter(|(_, m)| m.file == file)
            .map(|(p, _)| p.as_slice())
            .min_by_key(|p| p.len())
            .expect("every file read is a module")
    }

    /// file → the files it imports from.
    fn graph(&self) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
        let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
        for module in self.modules.values() {
            edges.entry(module.file.clone()).or_default();
        }
        for (file, reference) in &self.references {
            let Some(absolute) = self.absolute(&reference.scope, &reference.segments) else { continue };
            let Some(defining) = self.defining(&absolute, 0) else { continue };
            let target = &self.modules[&defining].file;
            // A module and its own submodules are one room, read together
            // (a `mod.rs` re-exports its parts, a part uses its parent's
            // types): only arrows between rooms can close a circle.
            let (from, to) = (self.path_of(file), self.path_of(target));
            if !from.starts_with(to) && !to.starts_with(from) {
                edges.entry(file.clone()).or_default().insert(target.clone());
            }
        }
        edges
    }
}

/// The strongly connected components of more than one file (Tarjan).
fn circles(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: HashMap<&'a PathBuf, usize>,
        low: HashMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        found: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(st: &mut State<'a>, v: &'a PathBuf) {
        let n = st.index.len();
        st.index.insert(v, n);
        st.low.insert(v, n);
        st.stack.push(v);
        st.on_stack.insert(v);
        for w in st.edges.get(v).into_iter().flatten() {
            if !st.index.contains_key(w) {
                visit(st, w);
                let low = st.low[v].min(st.low[w]);
                st.low.insert(v, low);
            } else if st.on_stack.contains(w) {
                let low = st.low[v].min(st.index[w]);
                st.low.insert(v, low);
            }
        }
        if st.low[v] == st.index[v] {
            let mut component = Vec::new();
            loop {
                let w = st.stack.pop().expect("v is on the stack");
                st.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                st.found.push(component);
            }
        }
    }
    let mut st = State {
        edges,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !st.index.contains_key(v) {
            visit(&mut st, v);
        }
    }
    st.found.sort();
    st.found
}

/// Every library and binary target's root file, from `cargo metadata`.
fn target_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for p in &tinybox_tests::workspace_packages() {
        for t in p["targets"].as_array().expect("targets") {
            let kinds = t["kind"].as_array().expect("kind");
            if kinds.iter().any(|k| ["lib", "bin", "cdylib", "rlib", "staticlib"].contains(&k.as_str().unwrap_or(""))) {
                roots.push(PathBuf::from(t["src_path"].as_str().expect("src_path")));
            }
        }
    }
    roots.sort();
    roots.dedup();
    roots
}

fn shown(f: &Path) -> String {
    f.strip_prefix(root()).unwrap_or(f).display().to_string()
}

/// A circle: its files, and the arrows between them.
type Circle = (Vec<String>, Vec<String>);

/// Every circle in the workspace's targets, the excused arrows left out.
fn workspace_circles() -> Vec<Circle> {
    let mut all = Vec::new();
    let roots = target_roots();
    assert!(roots.len() >= 12, "too few targets found: {roots:?}");
    for target in roots {
        let mut krate = Crate::default();
        let dir = target.parent().expect("a directory").to_path_buf();
        read_module(&mut krate, &target, Vec::new(), dir);
        let mut graph = krate.graph();
        for (from, to, _) in EXCUSED_ARROWS {
            if let Some(arrows) = graph.get_mut(&root().join(from)) {
                arrows.remove(&root().join(to));
            }
        }
        for circle in circles(&graph) {
            let arrows = circle
                .iter()
                .flat_map(|f| {
                    graph[f].iter().filter(|t| circle.contains(t)).map(move |t| format!("{} -> {}", shown(f), shown(t)))
                })
                .collect();
            all.push((circle.iter().map(|f| shown(f)).collect::<Vec<_>>(), arrows));
        }
    }
    all.sort();
    all.dedup();
    all
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let found = workspace_circles();
    let unexcused: Vec<&Circle> = found
        .iter()
        .filter(|(files, _)| !EXCUSED_CIRCLES.iter().any(|(excused, _)| excused.iter().eq(files.iter())))
        .collect();
    assert!(
        unexcused.is_empty(),
        "import circles (each module should know only what is beneath it: move what both need into the lower one, or give an error to a leaf of the module that raises it), each its files and the arrows between them: {unexcused:#?}"
    );
    // An excused circle that is gone is taken off the list, so the list
    // only ever shrinks.
    for (excused, why) in EXCUSED_CIRCLES {
        assert!(
            found.iter().any(|(files, _)| excused.iter().eq(files.iter())),
            "the excused circle {excused:?} ({why}) is gone or changed: take it off EXCUSED_CIRCLES"
        );
    }
}

/// The graph sees what it must: a circle through a re-export, a `super::`
/// path, an inline module's `super` (its own file) and a `#[path]` test
/// module, in a crate written for the check.
#[test]
fn the_import_graph_sees_circles_through_reexports_and_super() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write("lib.rs", "mod error;\nmod engine;\nmod leaf;\npub use error::Error;\n");
    write("error.rs", "use crate::engine::CopyError;\npub enum Error { Copy(CopyError) }\n");
    write("engine/mod.rs", "mod copy;\npub use copy::CopyError;\n");
    write(
        "engine/copy.rs",
        "//! `crate::leaf::Nothing` in a comment is no import\npub struct CopyError;\nfn f() -> crate::Error { todo!() }\n\
         #[cfg(test)]\n#[path = \"copy_tests.rs\"]\nmod tests;\n",
    );
    write("engine/copy_tests.rs", "use super::*;\nuse crate::leaf::Leaf;\n");
    write("leaf.rs", "pub struct Leaf;\nconst S: &str = \"crate::error::Error\";\nmod tests { use super::Leaf; }\n");
    let lib = dir.path().join("lib.rs");
    let mut krate = Crate::default();
    read_module(&mut krate, &lib, Vec::new(), dir.path().to_path_buf());
    let found = circles(&krate.graph());
    let names: Vec<Vec<String>> = found
        .iter()
        .map(|c| c.iter().map(|f| f.strip_prefix(dir.path()).expect("inside").display().to_string()).collect())
        .collect();
    assert_eq!(names, vec![vec!["engine/copy.rs".to_owned(), "error.rs".to_owned()]]);
    let graph = krate.graph();
    let leaf = dir.path().join("leaf.rs");
    assert_eq!(graph[&leaf], BTreeSet::new(), "the leaf imports nothing");
    assert!(graph[&dir.path().join("engine/copy_tests.rs")].contains(&leaf));
}
