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

## test: every test tier this host can run (installs what it needs; builds the guest image for the E tier)
.PHONY: test
test: deps
	$(CARGO) build --locked --workspace --all-targets
	@if docker version >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory guest-image; \
	else \
		echo "make test: no Docker engine answers; the E tier (tests/tests/e2e.rs) will SKIP"; \
	fi
	$(CARGO) test --locked --workspace --no-fail-fast

## guest-image: build the guest's binaries and the image (guest-image/build.sh, offline, skipped when up to date)
.PHONY: guest-image
guest-image:
	$(CARGO) build --release --locked -p sandtopd -p sandtop-demo -p sandtop-probe
	./guest-image/build.sh

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

## clean: remove build output
.PHONY: clean
clean:
	$(CARGO) clean
