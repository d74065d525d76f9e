//! The embedded corpus: case files and requirement catalogues, per protocol.

include!(concat!(env!("OUT_DIR"), "/corpus.rs"));

/// The files under `corpus/<dir>/`, in path order.
pub fn files_under(dir: &str) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
    FILES.iter().copied().filter(move |(path, _)| {
        path.strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// One file by its path under `corpus/`.
pub fn file(path: &str) -> Option<&'static str> {
    FILES
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, text)| *text)
}
