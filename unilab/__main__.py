from unilab.cli.main import main
from unilab.exit_status import exit_with

exit_with(main())
