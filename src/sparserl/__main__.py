from sparserl.cli import main

# The guard matters: the verifier's forkserver workers re-import this module.
if __name__ == "__main__":
    raise SystemExit(main())
