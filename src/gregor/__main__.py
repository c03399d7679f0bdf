from gregor.cli import main

raise SystemExit(main())
