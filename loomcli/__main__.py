from loomcli.fastpath import main

# Guarded: with the spawn start method (macOS, Windows) PDF workers re-import __main__.
if __name__ == "__main__":
    main()
