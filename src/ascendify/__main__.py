from ascendify.cli import main

raise SystemExit(main())
