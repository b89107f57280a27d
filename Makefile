# Sandtop. `make help` lists the targets.
SHELL := /bin/bash
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.DEFAULT_GOAL := help

## help: list the documented targets
.PHONY: help
help:
	@grep -E '^## ' $(MAKEFILE_LIST) | sed -e 's/^## /  /' -e 's/: /\t/' | expand -t 14

## deps: install the system packages tests and benchmarks need (apt-get, when missing)
.PHONY: deps
deps:
	@./scripts/install-deps.sh

## build: build every binary (release, --locked)
.PHONY: build
build:
	$(CARGO) build --release --locked --workspace

## test: every test tier this host can run (installs what it needs; builds the guest image for the E tier and the VM image for the VM tier); a failing step does not stop the later ones, the end lists what failed
.PHONY: test
# The tests build host-cli's bench command too, so its unit tests run.
TEST_FEATURES ?= --features host-cli/bench
# Every step after the build runs even when an earlier one failed (one run
# shows everything that is broken); cargo's own list of failed test
# targets and their failure messages are kept from its output (both
# streams) for the summary at the end, so a log's tail shows why.
TEST_LOG ?= $(SDK_TARGET)/make-test.log
test: deps
	$(CARGO) build --locked --workspace --all-targets $(TEST_FEATURES)
	@failed=(); \
	if docker version >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory guest-image || failed+=("the guest image (make guest-image)"); \
		if command -v qemu-system-$$(uname -m) >/dev/null 2>&1; then \
			./guest-vm/build.sh || failed+=("the VM image (guest-vm/build.sh)"); \
		else \
			echo "make test: no qemu-system-$$(uname -m); the VM tier (host-cli/tests/qemu.rs) will SKIP"; \
		fi; \
	else \
		echo "make test: no Docker engine answers; the E tier (tests/tests/e2e.rs) and the VM tier will SKIP"; \
	fi; \
	mkdir -p "$(dir $(TEST_LOG))"; \
	$(CARGO) test --locked --workspace --no-fail-fast $(TEST_FEATURES) 2>&1 | tee "$(TEST_LOG)"; \
	status=$${PIPESTATUS[0]}; \
	if [ $$status -ne 0 ]; then \
		targets=$$(awk '/^error: [0-9]+ targets? failed:/ {f=1; next} f && /^    / {sub(/^ +/, ""); printf "%s%s", sep, $$0; sep = ", "; next} {f=0}' "$(TEST_LOG)"); \
		failed+=("cargo test (exit $$status): $${targets:-see its output above}"); \
	fi; \
	$(MAKE) --no-print-directory sdk-test || failed+=("the Python tier (make sdk-test)"); \
	if [ $${#failed[@]} -ne 0 ]; then \
		if [ $$status -ne 0 ]; then \
			echo "make test: what the failed Rust tests printed (from $(TEST_LOG), at most 40 lines each):"; \
			awk '/^failures:$$/ {f=1; n=0; next} /^test result:/ {f=0} f && n < 40 {print "  | " $$0; n++}' "$(TEST_LOG)"; \
		fi; \
		echo "make test: $${#failed[@]} step(s) failed:"; \
		printf '  - %s\n' "$${failed[@]}"; \
		exit 1; \
	fi; \
	echo "make test: every tier passed (or printed why it skipped)"

## test-full: `make test` with the whole offline task set in host-cli/tests/batch.rs (SANDTOP_BATCH_FULL=1: every task of examples/tasks/ with --parallel 4; `make test` runs one task of each app)
.PHONY: test-full
test-full:
	SANDTOP_BATCH_FULL=1 $(MAKE) --no-print-directory test

## sdk-test: the Python package (python/) in a virtualenv with openai==3.57.0, anthropic==2.17.0 and mcp==2.3.0 from PyPI: unit tests, then the SDK exercise and `host-cli mcp` driven by the MCP Python SDK on a real guest (SKIPs without Docker, the guest image or PyPI; SANDTOP_REQUIRE=docker makes that a failure)
SDK_VENV ?= $(SDK_TARGET)/sdk-venv
SDK_TARGET ?= $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)
.PHONY: sdk-test
sdk-test:
	@if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then \
		if echo ",$$SANDTOP_REQUIRE," | grep -Eq ',(python|docker|all),'; then \
			echo "sdk-test: python3 with venv is required (SANDTOP_REQUIRE) but missing"; exit 1; \
		fi; \
		echo "SKIP python: python3 with venv and ensurepip is not installed"; exit 0; \
	fi; \
	set -e; \
	$(CARGO) build --locked -p host-cli -p sandtop-testkit --bin host-cli --bin mock-responses; \
	python3 -m venv "$(SDK_VENV)"; \
	if ! "$(SDK_VENV)/bin/python" -m pip install --quiet --disable-pip-version-check './python[openai,anthropic,test,view]'; then \
		if echo ",$$SANDTOP_REQUIRE," | grep -Eq ',(python|docker|all),'; then \
			echo "sdk-test: installing openai==3.57.0, anthropic==2.17.0 and pytest from PyPI failed (pip's error above), and SANDTOP_REQUIRE asks for this tier"; exit 1; \
		fi; \
		echo "SKIP python: cannot install openai==3.57.0, anthropic==2.17.0 and pytest from PyPI (pip's error above; is PyPI reachable?)"; exit 0; \
	fi; \
	"$(SDK_VENV)/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall ./python; \
	SANDTOP_HOST_CLI="$(SDK_TARGET)/debug/host-cli" SANDTOP_MOCK_RESPONSES="$(SDK_TARGET)/debug/mock-responses" \
		"$(SDK_VENV)/bin/python" -m pytest -rs python/tests

## soak: 10,000 steps of the real loop on one guest (host-cli/tests/soak.rs; make test runs 300): open files and memory stay flat, figures on stderr
.PHONY: soak
soak:
	SANDTOP_SOAK_STEPS=10000 $(CARGO) test --locked -p host-cli --test soak -- --nocapture

## guest-image: build the guest's binaries and the image (guest-image/build.sh, offline, skipped when up to date)
.PHONY: guest-image
guest-image:
	$(CARGO) build --release --locked -p sandtopd -p sandtop-demo -p sandtop-probe
	./guest-image/build.sh

## guest-vm: the VM guest for --backend qemu from the guest image's root filesystem: rootfs.ext4, Debian's kernel, an initramfs (guest-vm/build.sh; offline from Debian's packages, skipped when up to date)
.PHONY: guest-vm
guest-vm: guest-image
	./guest-vm/build.sh

## guest: build the guest image (works offline), install host-cli and sandtopd into ~/.cargo/bin (one release build)
.PHONY: guest
guest:
	@CARGO="$(CARGO)" ./scripts/guest.sh

## lint: rustfmt check, clippy with warnings denied, cargo-deny (licences, bans, sources; deny.toml)
.PHONY: lint
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets --all-features -- -D warnings
	@command -v cargo-deny >/dev/null 2>&1 || $(CARGO) install --locked cargo-deny --version 0.20.2
	$(CARGO) deny --locked check licenses bans sources

## deny-advisories: cargo-deny's RustSec advisories (needs the advisory database from GitHub)
.PHONY: deny-advisories
deny-advisories:
	$(CARGO) deny --locked check advisories

## fuzz: the fuzz targets of fuzz/ under libFuzzer, stable toolchain (FUZZ_RUNS=1000000, FUZZ_SECONDS=300 each)
.PHONY: fuzz
fuzz:
	@./scripts/fuzz.sh

## bench: sandtopd's side-by-side latency figures on a fresh Xvfb (see BENCHMARKS.md)
.PHONY: bench
bench: deps
	$(CARGO) build --release --locked -p sandtopd --features bench
	./target/release/sandtopd bench

## bench-guest: host-cli's guest figures (boot, step through the channel, idle memory, N guests; BENCHMARKS.md), built with --features bench
.PHONY: bench-guest
bench-guest: guest-image
	$(CARGO) build --release --locked -p host-cli --features bench
	./target/release/host-cli bench $(BENCH_ARGS)

## clean: remove build output
.PHONY: clean
clean:
	$(CARGO) clean
