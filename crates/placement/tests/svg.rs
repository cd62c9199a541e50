//! The SVG picture (`plan --output svg`): pinned by snapshots, one drawn as
//! boxes (3 zones x 3 nodes, with a Preferred violation and an unplaced
//! member) and one drawn as the shard x zone grid (100 shards on 90 nodes).
//! `UPDATE_SNAPSHOTS=1 cargo test -p placement --test svg` rewrites them;
//! look at the pictures before committing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use placement::*;
use std::path::PathBuf;

fn snapshot(name: &str, svg: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, svg).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_SNAPSHOTS=1 writes it)", path.display()));
    assert!(
        want == svg,
        "{} differs from the rendering (UPDATE_SNAPSHOTS=1 rewrites it)",
        path.display()
    );
}

/// Well-formed enough for a browser: one root, balanced elements.
fn balanced(svg: &str) {
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    for tag in ["g", "text", "title"] {
        let open =
            svg.matches(&format!("<{tag}>")).count() + svg.matches(&format!("<{tag} ")).count();
        let close = svg.matches(&format!("</{tag}>")).count();
        assert_eq!(open, close, "<{tag}> opened {open} times, closed {close}");
    }
}

#[test]
fn three_zones_are_drawn_as_nested_boxes() {
    let mut p = problem(3, 3);
    for z in ["a", "b", "c"] {
        for i in 1..=3 {
            // node-10 sorts after node-2 (natural order).
            let i = if i == 3 { 10 } else { i };
            p.nodes.push(zoned(
                &format!("node-{z}-{i}"),
                "r1",
                &format!("zone-{z}"),
                4,
            ));
        }
    }
    // Zone c keeps one node; zone a's nodes have room for two members, the
    // others for one: 10 places for 12 members, so two are unplaced, and a
    // shard of 4 in 3 zones exceeds the Preferred zone limit of 1.
    p.nodes
        .retain(|n| !n.name.starts_with("node-c") || n.name == "node-c-1");
    p.nodes
        .iter_mut()
        .for_each(|n| n.allocatable.pods = if n.name.starts_with("node-a") { 2 } else { 1 });
    p.constraints = vec![
        constraint("zone", 1, Mode::Preferred),
        constraint("node", 1, Mode::Required),
    ];
    let plan = plan(&p).unwrap();
    assert!(!plan.unplaced.is_empty() && !plan.violations.is_empty());
    let svg = render_svg(&Picture::of_plan(&p, &plan));
    balanced(&svg);
    assert!(svg.contains(">zone zone-a<") && svg.contains(">node-a-10<"));
    let (two, ten) = (
        svg.find(">node-a-2<").unwrap(),
        svg.find(">node-a-10<").unwrap(),
    );
    assert!(two < ten, "node-a-2 is drawn before node-a-10");
    assert!(svg.contains(">unplaced<"), "unplaced members are listed");
    assert!(svg.contains("#d62728"), "violations are red");
    snapshot("boxes-3x3.svg", &svg);
}

#[test]
fn a_hundred_shards_on_ninety_nodes_are_drawn_as_a_grid() {
    let mut p = problem(100, 2);
    for z in 0..9 {
        for i in 1..=10 {
            let zone = format!("zone-{z}");
            let region = format!("r{}", z / 3);
            p.nodes.push(zoned(&format!("n{z}-{i}"), &region, &zone, 8));
        }
    }
    p.constraints = vec![constraint("zone", 1, Mode::Required)];
    let plan = plan(&p).unwrap();
    assert!(plan.feasible);
    let svg = render_svg(&Picture::of_plan(&p, &plan));
    balanced(&svg);
    assert!(svg.contains("90 nodes: members of each shard per zone"));
    assert!(svg.contains(">shard 99<"));
    // Readable: the picture stays a few screens tall, not one row per member.
    let height: u32 = svg
        .split("height=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert!(height < 2200, "{height}");
    snapshot("grid-100-shards.svg", &svg);
}
