//! The Makefile forms of docs/holds.md: `.ONESHELL` with `-ec`, and lines
//! joined with `\`, hold the lock across the recipe's lines.

use crate::hold::{Place, read};

/// The steps of the recipe, each line a shell line: the second records
/// whether the lock is held (`status` exits 1 then), the third that it ran.
const ONESHELL: &str = "\
.ONESHELL:
.SHELLFLAGS = -ec

deploy:
\teval \"$$(\"$$ZKLOCK\" hold -z \"$$ZK\" \"$$P\")\"
\t\"$$ZKLOCK\" status -z \"$$ZK\" \"$$P\" > /dev/null || echo $$? > \"$$OUT/during\"
\techo ran > \"$$OUT/ran\"
\t\"$$ZKLOCK\" release
";

const JOINED: &str = "\
deploy:
\tset -e; \\
\teval \"$$(\"$$ZKLOCK\" hold -z \"$$ZK\" \"$$P\")\"; \\
\t\"$$ZKLOCK\" status -z \"$$ZK\" \"$$P\" > /dev/null || echo $$? > \"$$OUT/during\"; \\
\techo ran > \"$$OUT/ran\"; \\
\t\"$$ZKLOCK\" release
";

/// docs/holds.md's wrong form: each line a shell of its own. The second
/// line waits (10 s at most) for the lock to be freed, as it is once the
/// first line's shell has exited.
const PER_LINE: &str = "\
deploy:
\teval \"$$(\"$$ZKLOCK\" hold -z \"$$ZK\" \"$$P\")\"
\tfor i in $$(seq 100); do \"$$ZKLOCK\" status -z \"$$ZK\" \"$$P\" > /dev/null && break; sleep 0.1; done; echo $$i > \"$$OUT/polls\"
";

/// Runs the Makefile's `deploy`; whether the lock was held on its second
/// line.
fn held_on_the_second_line(place: &Place, makefile: &str) -> bool {
    std::fs::write(place.file("Makefile"), makefile).unwrap();
    let out = place.run(r#"make -s -f "$OUT/Makefile" deploy"#);
    out.assert_code(0);
    // 1: held (69 or 70: ZooKeeper did not answer).
    read(&place.file("during")) == "1\n"
}

fn recipe_holds_the_lock_across_its_lines(tag: &str, makefile: &str) {
    let place = Place::new(tag);
    let zk = place.zk();
    // What docs/holds.md warns of: freed while the recipe runs on.
    std::fs::write(place.file("Makefile"), PER_LINE).unwrap();
    place
        .run(r#"make -s -f "$OUT/Makefile" deploy"#)
        .assert_code(0);
    let polls: u32 = read(&place.file("polls")).trim().parse().unwrap();
    assert!(polls < 100, "never freed during the recipe");
    place.assert_clean(zk);
    assert!(held_on_the_second_line(&place, makefile));
    assert_eq!(read(&place.file("ran")), "ran\n");
    assert!(place.is_free(zk));
    place.assert_clean(zk);
}

#[test]
fn a_oneshell_recipe_holds_the_lock_across_its_lines() {
    recipe_holds_the_lock_across_its_lines("make-oneshell", ONESHELL);
}

#[test]
fn a_recipe_of_joined_lines_holds_the_lock_across_them() {
    recipe_holds_the_lock_across_its_lines("make-joined", JOINED);
}

/// A hold not taken stops the recipe at its line in both forms: the steps
/// after it never run, and make fails.
#[test]
fn a_hold_not_taken_stops_the_recipe() {
    let place = Place::new("hold-make-busy");
    let _holder = place.held_by_a_shell();
    for makefile in [ONESHELL, JOINED] {
        let busy = makefile.replace(" hold -z", " hold -n -z");
        std::fs::write(place.file("Makefile"), busy).unwrap();
        let out = place.run(r#"make -s -f "$OUT/Makefile" deploy"#);
        assert_ne!(out.code(), 0, "{}", out.stderr);
        assert!(!place.file("ran").exists(), "a step ran without the lock");
    }
}
