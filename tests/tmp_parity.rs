use grade::html::{lessons, pictures};
use grade::i18n::Lang;
use grade::observations::Observations;
use grade::report::evidence::Observed;
use std::path::PathBuf;

#[test]
fn parity() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for e in std::fs::read_dir(root.join("tests/recorded")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        let ex = name.split('.').next().unwrap().to_string();
        let obs: Observations = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let spec = grade::spec::Exercise::load(&root.join("exercises").join(&ex)).unwrap();
        let full = Observed::of(&obs).with_params(&spec.params);
        let mut evs = vec![Observed::of(&obs), full.clone()];
        for k in full.metrics.keys() {
            let mut e = full.clone();
            e.metrics.remove(k);
            evs.push(e);
            // a step slower: the break-even's other branch
            let mut e = full.clone();
            if let Some(v) = e.metrics.get(k).and_then(|v| v.as_f64()) {
                e.metrics.insert(k.clone(), serde_json::json!(v * 7.0));
                evs.push(e);
            }
        }
        for k in full.rows.keys() {
            let mut e = full.clone();
            e.rows.remove(k);
            evs.push(e);
        }
        for k in full.params.keys() {
            let mut e = full.clone();
            e.params.remove(k);
            evs.push(e);
        }
        for ev in evs {
            for lang in [Lang::Zh, Lang::En] {
                let a = lessons::charts(&ex, &ev, lang);
                let b = pictures::draw(&spec.pictures, &ev, lang);
                assert_eq!(a.len(), b.len(), "{name}");
                for (x, y) in a.iter().zip(&b) {
                    assert_eq!(x.title, y.title, "{name}");
                    assert_eq!(x.head, y.head, "{name}");
                    assert_eq!(x.rows, y.rows, "{name}");
                    assert_eq!(x.svg, y.svg, "{name}");
                    n += 1;
                }
            }
        }
    }
    eprintln!("{n} charts equal");
}
