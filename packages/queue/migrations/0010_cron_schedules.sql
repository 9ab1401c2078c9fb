CREATE TABLE "skiplock"."schedules" (
	"name" text PRIMARY KEY NOT NULL,
	"cron" text NOT NULL,
	"timezone" text NOT NULL,
	"job_type" text NOT NULL,
	"queue" text NOT NULL,
	"paused" boolean DEFAULT false NOT NULL,
	"last_tick_at" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
