//! The import check's reader: a crate read from its root file along its
//! `mod` declarations into modules (their items, their `use`s) and the
//! paths each file names, resolved through re-exports to the file that
//! defines what they name, giving the graph of which file imports which.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::lex::{Token, lex};

/// One path a file names, as written, in the module it is written in.
#[derive(Debug)]
pub struct Reference {
    pub scope: Vec<String>,
    pub segments: Vec<String>,
}

/// One `use` a module makes: the name it binds (`None` for a glob) to the
/// path it names, as written.
#[derive(Debug)]
pub struct Import {
    pub name: Option<String>,
    pub segments: Vec<String>,
}

#[derive(Default, Debug)]
pub struct Module {
    pub file: PathBuf,
    /// Names of items defined here (structs, enums, functions, ...).
    pub items: BTreeSet<String>,
    pub imports: Vec<Import>,
}

#[derive(Default)]
pub struct Crate {
    pub modules: BTreeMap<Vec<String>, Module>,
    pub references: Vec<(PathBuf, Reference)>,
}

/// Expands the use tree at `tokens[*at..]` under `prefix` into `out`.
pub fn use_tree(tokens: &[Token], at: &mut usize, prefix: Vec<String>, out: &mut Vec<Import>) {
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

pub const ITEM_KEYWORDS: &[&str] =
    &["struct", "enum", "fn", "type", "trait", "const", "static", "union", "macro_rules"];

/// Reads `file` as the module `path` of `krate`, then the files its `mod`
/// declarations name.
pub fn read_module(krate: &mut Crate, file: &Path, path: Vec<String>, children_dir: PathBuf) {
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
    pub fn absolute(&self, scope: &[String], segments: &[String]) -> Option<Vec<String>> {
        self.absolute_within(scope, segments, 0)
    }

    pub fn absolute_within(&self, scope: &[String], segments: &[String], hops: usize) -> Option<Vec<String>> {
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
    pub fn defining(&self, path: &[String], hops: usize) -> Option<Vec<String>> {
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
    pub fn path_of(&self, file: &Path) -> &[String] {
        self.modules
            .iter()
            .filter(|(_, m)| m.file == file)
            .map(|(p, _)| p.as_slice())
            .min_by_key(|p| p.len())
            .expect("every file read is a module")
    }

    /// file → the files it imports from.
    pub fn graph(&self) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
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
