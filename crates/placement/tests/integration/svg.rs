//! The SVG picture (`plan --output svg`): pinned by snapshots, one drawn as
//! boxes (3 zones x 3 nodes, with a Preferred violation and an unplaced
//! member) and one drawn as the shard x zone grid (100 shards on 90 nodes).
//! `UPDATE_SNAPSHOTS=1 cargo test -p placement --test integration svg::` rewrites them;
//! look at the pictures before committing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
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

/// The headless browser the render check uses (`make setup` installs
/// Debian's `chromium`).
fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join(name))
                    .find(|p| p.is_file())
            })
        })
}

/// Shares of the screenshot's pixels that are not near-white, and the number
/// of distinct colours among them.
fn ink(png_path: &std::path::Path) -> (f64, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_path).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    assert!(
        channels >= 3,
        "colour screenshot expected, got {:?}",
        info.color_type
    );
    let pixels = buf[..info.buffer_size()].chunks(channels);
    let total = (info.width * info.height) as f64;
    let mut inked = 0usize;
    let mut colours = std::collections::BTreeSet::new();
    for px in pixels {
        if px[..3].iter().any(|&c| c < 235) {
            inked += 1;
            colours.insert((px[0] / 16, px[1] / 16, px[2] / 16));
        }
    }
    (inked as f64 / total, colours.len())
}

/// Both pinned pictures, opened in headless Chromium: the screenshot is not
/// blank (text, boxes and the shard colours are drawn). Fails when no
/// browser is installed (run `make setup`), unless SVG_RENDER_SKIP=1.
#[test]
fn the_pictures_render_in_a_browser() {
    let Some(browser) = chromium() else {
        if std::env::var_os("SVG_RENDER_SKIP").is_some() {
            eprintln!("the_pictures_render_in_a_browser: skipped (SVG_RENDER_SKIP=1)");
            return;
        }
        panic!(
            "no chromium on PATH: `make setup` installs it (SVG_RENDER_SKIP=1 skips this check)"
        );
    };
    let dir = std::env::temp_dir().join(format!("valkey-rs-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, min_colours) in [("boxes-3x3.svg", 4), ("grid-100-shards.svg", 4)] {
        let svg = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/snapshots")
            .join(name);
        let shot = dir.join(format!("{name}.png"));
        let out = std::process::Command::new(&browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--window-size=1200,900",
            ])
            .arg(format!("--user-data-dir={}", dir.join("profile").display()))
            .arg(format!("--screenshot={}", shot.display()))
            .arg(format!("file://{}", svg.display()))
            .output()
            .unwrap();
        assert!(
            shot.is_file(),
            "{name}: no screenshot; chromium said: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (share, colours) = ink(&shot);
        assert!(
            share > 0.01,
            "{name}: the screenshot is blank ({:.3}% of it drawn)",
            share * 100.0
        );
        assert!(
            colours >= min_colours,
            "{name}: only {colours} colours drawn (shard colours missing?)"
        );
        println!(
            "{name}: {:.1}% of the screenshot drawn, {colours} colours",
            share * 100.0
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
